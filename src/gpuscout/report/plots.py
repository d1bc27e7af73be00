"""The report's figures of benchmark runs, drawn with matplotlib (Agg) from stored records, and how
a figure is rendered (SVG, PNG). Each function returns a Figure or None when the records hold
nothing for it; `report/html.py` and `report/exporters/as_markdown.py` decide how to embed them.
The figures of the user's own scripts (watch, tune, sweep) are in report/script_plots.py."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display: files and strings only

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import EngFormatter, ScalarFormatter  # noqa: E402

from gpuscout.record.run import RunRecord  # noqa: E402
from gpuscout.report import format as fmt  # noqa: E402

plt.rcParams.update(
    {
        "figure.dpi": 100,
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "svg.fonttype": "none",
        "figure.autolayout": True,
    }
)


def ok_runs(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in records if r.status in ("ok", "not_reached") and r.throughput]


def config_label(r: RunRecord) -> str:
    """What tells one configuration from another: runs differing only in their data mode (synthetic,
    tf.data, real files) read differently, 5k to 19k images/s."""
    seq = f" seq{r.seq_len}" if r.seq_len else ""
    return f"{r.gpu_label} · {fmt.config(r)} · b{r.batch_size}{seq} · {r.data.value}"


def short_ids(runs: list[RunRecord], shortest: int = 6) -> dict[str, str]:
    """Each run's id cut to the fewest characters (at least `shortest`) that still tell the runs
    apart: two labels of a plot are never the same."""
    ids = {r.id for r in runs}
    length = shortest
    while len({i[:length] for i in ids}) < len(ids) and length < max(map(len, ids)):
        length += 1
    return {i: i[:length] for i in ids}


def readable_ticks(fig: Figure) -> None:
    """Large tick values as 50k, 1.2M: written out, neighbouring ones ran into each other."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = [abs(t) for t in axis.get_majorticklocs()]
            if isinstance(axis.get_major_formatter(), ScalarFormatter) and ticks and max(ticks) >= 10_000:
                axis.set_major_formatter(EngFormatter(sep=""))


# Bars in one throughput chart: the fastest configurations, past which a chart is a wall of labels
# (a bar is 0.32 in: hundreds of runs made a figure metres tall); the runs table has every run
MOST_BARS = 30


def throughput_by_config(records: list[RunRecord], workload: str) -> Figure | None:
    """Median throughput of each configuration of one workload (its newest run), with its 95% CI as
    error bars; the fastest MOST_BARS configurations where there are more."""
    newest: dict[str, RunRecord] = {}
    for r in sorted((r for r in ok_runs(records) if r.workload == workload), key=lambda r: r.created_utc):
        newest[config_label(r)] = r
    runs = sorted(newest.values(), key=lambda r: r.throughput.median)
    if not runs:
        return None
    shown_of = f" (the fastest {MOST_BARS} of {len(runs)} configurations)" if len(runs) > MOST_BARS else ""
    runs = runs[-MOST_BARS:]
    ids = short_ids(runs)
    labels = [f"{config_label(r)} [{ids[r.id]}]" for r in runs]
    medians = [r.throughput.median for r in runs]
    low = [m - (r.throughput.ci95_low or m) for m, r in zip(medians, runs)]
    high = [(r.throughput.ci95_high or m) - m for m, r in zip(medians, runs)]
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.32 * len(runs)))
    ax.barh(range(len(runs)), medians, xerr=[low, high], color="#4C72B0", ecolor="black", capsize=3)
    ax.set_yticks(range(len(runs)), labels)
    ax.set_xlabel(f"throughput ({runs[0].unit}), median of windows, 95% CI")
    ax.set_title(f"{workload}: throughput by configuration, its newest run{shown_of}")
    return fig


def cost_efficiency(records: list[RunRecord], workload: str) -> Figure | None:
    """Throughput per dollar against throughput: up and to the right is better."""
    runs = [r for r in ok_runs(records) if r.workload == workload and r.cost]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.2))
    markers = "osD^v<>ph*"
    ids = short_ids(runs)
    for i, r in enumerate(runs):  # a legend, not labels beside the points: close points made them overlap
        per_hour = r.cost.hourly.usd_per_hour
        x = r.throughput.median
        y = x * 3600 / per_hour
        ax.scatter(
            x, y, s=40, marker=markers[i % len(markers)], label=f"{config_label(r)} [{ids[r.id]}] ({per_hour:.2f} $/h)"
        )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    unit = runs[0].unit.split("/")[0]
    ax.set_xlabel(f"throughput ({runs[0].unit})")
    ax.set_ylabel(f"{unit} per USD")
    ax.set_title(f"{workload}: cost efficiency")
    return fig


def throughput_vs_batch(records: list[RunRecord], workload: str) -> Figure | None:
    """One line per GPU/backend/precision with two or more batch sizes measured."""
    lines: dict[str, list[RunRecord]] = {}
    for r in ok_runs(records):
        if r.workload == workload:
            key = f"{r.gpu_label} · {r.backend.value} {r.precision.value}"
            lines.setdefault(key, []).append(r)
    lines = {k: v for k, v in lines.items() if len({r.batch_size for r in v}) >= 2}
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, runs in lines.items():
        best: dict[int, RunRecord] = {}
        for r in runs:  # the newest run per batch size
            if r.batch_size not in best or r.created_utc > best[r.batch_size].created_utc:
                best[r.batch_size] = r
        xs = sorted(best)
        ys = [best[x].throughput.median for x in xs]
        err = [
            [y - (best[x].throughput.ci95_low or y) for x, y in zip(xs, ys)],
            [(best[x].throughput.ci95_high or y) - y for x, y in zip(xs, ys)],
        ]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=key)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch size")
    ax.set_ylabel(f"throughput ({next(iter(lines.values()))[0].unit})")
    ax.set_title(f"{workload}: throughput against batch size")
    ax.legend(fontsize=7)
    return fig


def ablation(records: list[RunRecord], workload: str) -> Figure | None:
    """Speedup of each precision/XLA/data setting over the slowest, per GPU and batch."""
    groups: dict[str, list[RunRecord]] = {}
    for r in ok_runs(records):
        if r.workload == workload:
            groups.setdefault(f"{r.gpu_label} b{r.batch_size}", []).append(r)
    groups = {k: v for k, v in groups.items() if len({(r.backend, r.precision, r.xla, r.data) for r in v}) >= 2}
    if not groups:
        return None
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.2 + 1.6 * len(groups)), squeeze=False)
    for ax, (key, runs) in zip(axes[:, 0], groups.items()):
        settings: dict[str, float] = {}
        for r in runs:
            label = f"{fmt.config(r)} {r.data.value}"
            settings[label] = max(settings.get(label, 0.0), r.throughput.median)
        base = min(settings.values())
        names = sorted(settings, key=settings.get)
        ax.barh(names, [settings[n] / base for n in names], color="#55A868")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_xlabel("speedup over the slowest setting (x)")
        ax.set_title(f"{workload} on {key}: what each setting buys", fontsize=9)
    return fig


def scaling(records: list[RunRecord], workload: str) -> Figure | None:
    """Throughput against device count from `gpuscout scale` runs (the newest per count), with
    linear scaling from the one-device point dashed."""
    runs = sorted(
        (r for r in ok_runs(records) if r.workload == workload and r.scale and r.scale.role != "worker"),
        key=lambda r: r.created_utc,
    )
    series: dict[str, dict[int, float]] = {}
    for r in runs:
        name = (r.gpu.name if r.gpu else None) or r.device
        batch = (
            f"weak b{r.per_device_batch_size}/device" if r.scale.mode == "weak" else f"strong b{r.batch_size}"
        )  # what the study held fixed
        key = f"{name} · {fmt.config(r)} · {batch}"
        series.setdefault(key, {})[r.devices] = r.throughput.median
    series = {k: v for k, v in series.items() if len(v) >= 2}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, points in series.items():
        xs = sorted(points)
        line = ax.plot(xs, [points[x] for x in xs], marker="o", label=key)[0]
        if 1 in points:
            ax.plot(xs, [points[1] * x for x in xs], ls="--", color=line.get_color(), lw=0.8)
    ax.set_xlabel("devices")
    ax.set_xticks(sorted({x for points in series.values() for x in points}))
    ax.set_ylabel(f"throughput ({runs[0].unit})")
    ax.set_title(f"{workload}: scaling (dashed: linear from one device)")
    ax.legend(fontsize=7)
    return fig


def latency_throughput(records: list[RunRecord], workload: str) -> Figure | None:
    """p99 latency against throughput per inference format, one point per batch size (newest)."""
    runs = sorted(
        (r for r in ok_runs(records) if r.workload == workload and r.inference and r.inference.latency),
        key=lambda r: r.created_utc,
    )
    series: dict[str, dict[int, RunRecord]] = {}
    for r in runs:
        name = (r.gpu.name if r.gpu else None) if r.device == "gpu" else "CPU"
        series.setdefault(f"{name} · {fmt.config(r)}", {})[r.batch_size] = r
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, points in series.items():
        xs = sorted(points)
        ax.plot(
            [points[b].samples_per_s for b in xs],
            [points[b].inference.latency.p99_ms for b in xs],
            marker="o",
            label=key,
        )
        for b in xs:
            ax.annotate(
                f"b{b}",
                (points[b].samples_per_s, points[b].inference.latency.p99_ms),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title(f"{workload}: inference latency against throughput (labels: batch size)")
    ax.legend(fontsize=7)
    return fig


TELEMETRY_PANELS = (
    ("gpu_util_pct", "GPU utilisation (%)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("power_w", "power (W)"),
    ("memory_used_bytes", "memory used (GiB)"),
    ("temperature_c", "temperature (°C)"),
)


def telemetry(record: RunRecord) -> Figure | None:
    """NVML samples over the run, with its timing windows shaded."""
    samples = record.telemetry.samples if record.telemetry else []
    if not samples:
        return None
    t0 = samples[0].t_monotonic_s
    ts = [s.t_monotonic_s - t0 for s in samples]
    fig, axes = plt.subplots(len(TELEMETRY_PANELS), 1, figsize=(9, 7.5), sharex=True)
    for ax, (key, label) in zip(axes, TELEMETRY_PANELS):
        values = [getattr(s, key) for s in samples]
        if key == "memory_used_bytes":
            values = [None if v is None else v / 2**30 for v in values]
        ax.plot(ts, [float("nan") if v is None else v for v in values], lw=1)
        ax.set_ylabel(label, fontsize=8)
        for w in record.windows:
            ax.axvspan(w.start_monotonic_s - t0, w.end_monotonic_s - t0, color="orange", alpha=0.15)
    axes[-1].set_xlabel("time since the first sample (s); shaded: timing windows")
    axes[0].set_title(f"telemetry of run {record.id} ({record.workload}, {record.gpu_label})")
    return fig


def svg(fig: Figure) -> str:
    readable_ticks(fig)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes, named as gpuscout's in its Software text chunk (what tells a plot
    gpuscout wrote from a user's file of the same name: core/outputs/'s "png" mark)."""
    readable_ticks(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": "gpuscout"})
    plt.close(fig)
    return buffer.getvalue()
