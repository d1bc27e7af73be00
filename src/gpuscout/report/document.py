"""What a report says, independent of HTML or Markdown: sections of text, figures and tables
built from stored records (`report/html.py` and `report/exporters/as_markdown.py` render it)."""

from __future__ import annotations

import json

from gpuscout.core.units import counted
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord
from gpuscout.record.trial import StoredTrial
from gpuscout.report import format as fmt
from gpuscout.report import plots, script_plots, watched_sections
from gpuscout.report.sections import Document, Section, TableData
from gpuscout.tune.results import Judged


def _machines(records: list[RunRecord]) -> TableData:
    seen: dict[tuple, dict] = {}
    for r in records:
        key = (r.env.hostname, r.gpu.name if r.gpu else None, r.env.driver_version)
        row = seen.setdefault(key, {"runs": 0, "first": r.created_utc, "last": r.created_utc, "r": r})
        row["runs"] += 1
        row["first"] = min(row["first"], r.created_utc)
        row["last"] = max(row["last"], r.created_utc)
    rows = []
    for (host, gpu, driver), row in seen.items():
        r = row["r"]
        memory = r.gpu.memory_total_bytes if r.gpu else None
        rows.append(
            [
                host or fmt.DASH,
                gpu or "CPU",
                fmt.bytes_(memory),
                driver or fmt.DASH,
                r.env.cuda_driver_version or fmt.DASH,
                f"{r.env.cpu_model or fmt.DASH} x {r.env.cpu_count or fmt.DASH}",
                str(row["runs"]),
                f"{row['first'][:10]} – {row['last'][:10]}",
            ]
        )
    return TableData("machines", ["host", "GPU", "GPU memory", "driver", "CUDA (driver)", "CPU", "runs", "dates"], rows)


def _runs(records: list[RunRecord]) -> TableData:
    rows = []
    for r in records:
        t = r.throughput
        per_million = r.cost.usd_per_million_units if r.cost else None
        rows.append(
            [
                r.id,
                r.created_utc[:16].replace("T", " "),
                r.workload,
                r.gpu_label,
                r.backend.value,
                r.precision.value if r.inference is None else fmt.config(r),
                "xla" if r.xla else "no-xla",
                r.data.value,
                str(r.batch_size),
                r.status,
                fmt.number(t.median if t else None),
                f"{fmt.number(t.ci95_low)}–{fmt.number(t.ci95_high)}"
                if t and t.ci95_low is not None and t.ci95_high is not None
                else fmt.DASH,
                r.unit,
                fmt.percent(t.cv, 2) if t else fmt.DASH,
                fmt.percent(r.mfu),
                fmt.bytes_(r.peak_memory_bytes),
                fmt.DASH if per_million is None else f"{per_million:.4f}",
                ", ".join(f.code for f in r.flags) or fmt.DASH,
            ]
        )
    return TableData(
        "runs",
        [
            "id",
            "created (UTC)",
            "workload",
            "GPU",
            "backend",
            "precision",
            "XLA",
            "data",
            "batch",
            "status",
            "median",
            "95% CI",
            "unit",
            "CV",
            "MFU",
            "peak memory",
            "USD / 1M",
            "flags",
        ],
        rows,
    )


# The runs whose whole record a report holds, the newest, and how much of each: a watched run's
# record is 10-20 KB of JSON, and a store of hundreds made the report megabytes of it (issue 78);
# `gpuscout results show ID --json` has every run's whole record
PROVENANCE_RUNS = 40
PROVENANCE_CHARS = 30_000


def _provenance(r: StoredRecord) -> str:
    shown = json.dumps(r.model_dump(mode="json", exclude={"telemetry": {"samples"}}), indent=2, default=str)
    if len(shown) <= PROVENANCE_CHARS:
        return shown
    return (
        f"{shown[:PROVENANCE_CHARS]}\n… cut at {PROVENANCE_CHARS:,} characters: `gpuscout results show {r.id} --json`"
    )


def _provenance_section(every: list[StoredRecord]) -> Section:
    newest = sorted(every, key=lambda r: r.created_utc, reverse=True)[:PROVENANCE_RUNS]
    older = len(every) - len(newest)
    return Section(
        "provenance",
        "Provenance of every run",
        [
            "The whole record of each run (telemetry samples left out): environment, versions, "
            "specification, windows, flags."
            + (
                f" The newest {PROVENANCE_RUNS} runs here; {counted(older, 'older run')}: "
                "`gpuscout results show ID --json`."
                if older > 0
                else ""
            )
        ],
        details=[(f"{r.id} · {r.workload} · {r.gpu_label} · {r.created_utc[:19]}", _provenance(r)) for r in newest],
    )


def _sweeps(sweeps: dict[str, list[StoredTrial]]) -> Section:
    section = Section(
        "sweeps",
        "Sweeps",
        [
            "`gpuscout sweep`: each trial's metric at each epoch; trials stopped early "
            "by the sweep's early_stop are dashed and marked where they stopped."
        ],
    )
    for name, trials in sweeps.items():
        section.figures.append((name, lambda n=name, t=trials: script_plots.sweep_curves(n, t)))
    return section


def newest_with_telemetry(records: list[StoredRecord]) -> RunRecord | None:
    """The run whose telemetry a report plots by default: the newest benchmark run that has samples."""
    sampled = [r for r in records if r.kind == "benchmark" and r.telemetry and r.telemetry.samples]
    return max(sampled, key=lambda r: r.created_utc) if sampled else None


def build(
    records: list[StoredRecord],
    telemetry_run: RunRecord | None,
    title: str = "gpuscout report",
    sweeps: dict[str, list[StoredTrial]] | None = None,
    decided: dict[str, Judged] | None = None,
) -> Document:
    """The report of benchmark runs and watched scripts alike; each section uses the kind it is about.
    `decided`: by tune session, its best setting as its saved report holds it (its one figure)."""
    every = records
    watched = [r for r in every if r.kind == "watch"]
    records = [r for r in every if r.kind == "benchmark"]
    workloads = sorted({r.workload for r in every})
    gpus = sorted({r.gpu_label for r in every})
    dates = sorted(r.created_utc for r in every)
    subtitle = (
        f"{counted(len(every), 'run')} of {counted(len(workloads), 'workload')} on {', '.join(gpus)}, "
        f"{dates[0][:10]} to {dates[-1][:10]}"
        if every
        else counted(len(sweeps or {}), "sweep")
    )
    sections = [Section("machines", "Machines and GPUs", tables=[_machines(every)])]
    throughput = Section(
        "throughput",
        "Throughput per workload and GPU",
        [
            "Median throughput over each run's timing windows; the bars are its 95% confidence "
            "interval (bootstrap of the median; docs/methodology.md)."
        ],
    )
    cost = Section(
        "cost",
        "Cost efficiency",
        [
            "Throughput per dollar against throughput, at each run's hourly "
            "cost (catalog price, --price or owned; docs/catalog.md)."
        ],
    )
    scaling = Section("scaling", "Scaling over GPUs", ["Throughput against the number of GPUs (`gpuscout scale`)."])
    batch = Section("batch", "Throughput against batch size", ["Newest run per batch size; log2 batch axis."])
    ablation = Section(
        "ablation",
        "Ablations",
        [
            "Each precision, XLA and input setting measured for the same "
            "workload, GPU and batch, as a speedup over the slowest."
        ],
    )
    inference = Section(
        "inference",
        "Inference latency",
        [
            "p99 latency of single synchronised requests "
            "against throughput, per format and batch size "
            "(`gpuscout bench --mode inference`)."
        ],
    )
    for w in sorted({r.workload for r in records}):
        for section, drawer in (
            (throughput, plots.throughput_by_config),
            (cost, plots.cost_efficiency),
            (scaling, plots.scaling),
            (batch, plots.throughput_vs_batch),
            (ablation, plots.ablation),
            (inference, plots.latency_throughput),
        ):
            section.figures.append((w, lambda d=drawer, w=w: d(records, w)))
    for section in (cost, scaling, batch, ablation, inference):
        section.text.append(_empty_hint(section.id))
    sections += [throughput, cost, scaling, batch, ablation, inference]
    tele = Section(
        "telemetry",
        "Telemetry over time",
        [
            "NVML samples at 10 Hz for one run (`--telemetry-run ID`; default: the newest run with "
            "telemetry); shaded: the timing windows the throughput was measured in."
        ],
    )
    if telemetry_run is not None:
        tele.figures.append((telemetry_run.id, lambda: plots.telemetry(telemetry_run)))
    else:
        tele.text.append("No stored run has telemetry (CPU runs, or --no-telemetry).")
    sections.append(tele)
    if watched:
        sections.append(watched_sections.watched(watched))
    tuned = watched_sections.tune_sessions(watched, decided or {})
    if tuned is not None:
        sections.append(tuned)
    if sweeps:
        sections.append(_sweeps(sweeps))
    sections.append(
        Section(
            "runs",
            "All benchmark runs",
            ["Every `gpuscout bench` and `scale` run, a row each: click a column to sort; type to filter."],
            tables=[_runs(records)],
        )
    )
    sections.append(_provenance_section(every))
    return Document(title, subtitle, sections)


def _empty_hint(section_id: str) -> str:
    return {
        "cost": "Runs without a price (GPU not in the catalog, no --price) are not shown here.",
        "scaling": "Shown for workloads measured at two or more GPU counts.",
        "batch": "Shown for configurations measured at two or more batch sizes.",
        "ablation": "Shown where two or more settings were measured on the same GPU and batch.",
        "inference": "Shown for workloads measured with --mode inference.",
    }[section_id]
