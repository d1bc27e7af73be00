"""CSV: stored runs as one flat row each (a watched script's row holds its main fit's figures,
where a benchmark's holds its settings), and comparisons as one row per group."""

from __future__ import annotations

import csv
import io

from gpuscout.report.exporters.base import Exporter, register

RUN_COLUMNS = (
    "id",
    "kind",
    "created_utc",
    "group_id",
    "workload",
    "backend",
    "precision",
    "xla",
    "batch_size",
    "seq_len",
    "data",
    "device",
    "gpu_name",
    "status",
    "unit",
    "throughput_median",
    "throughput_ci95_low",
    "throughput_ci95_high",
    "throughput_cv",
    "samples_per_s",  # the headline: a watched run's whole epochs where it ran them (record/watch.py)
    "windows_samples_per_s",  # watched runs: the steady windows' median, the steps alone
    "step_time_s",
    "epoch_time_s",
    "compile_s",
    "peak_memory_bytes",
    "achieved_tflops",
    "mfu",
    "input_wait_share",  # of the timed windows' time, blocked on the next batch
    "outside_step_share",  # watched scripts: the loop's time between steps
    "gpu_idle_share",  # watched scripts: 1 - NVML's utilisation over the steady windows
    "power_mean_w",
    "energy_j_per_1000_samples",
    "flags",
    "verdict",  # watched scripts: the first cause's sentence (the JSON has them all)
    "methodology_version",
)

COMPARISON_COLUMNS = (
    "workload",
    "by",
    "group",
    "runs",
    "basis",
    "value",
    "ci95_low",
    "ci95_high",
    "ratio",
    "ratio_low",
    "ratio_high",
    "p_value",
    "test",
    "verdict",
)


@register
class Csv(Exporter):
    name = "csv"
    title = "CSV"
    suffix = ".csv"

    def runs(self, records) -> str:
        """One flat row per record; a watched script's row holds its main fit's figures (backend,
        precision policy, XLA) where a benchmark's holds its settings."""
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=RUN_COLUMNS)
        writer.writeheader()
        for r in records:
            t = r.throughput
            telemetry = r.telemetry
            row = {
                **{k: v for k, v in r.model_dump(mode="json", include=set(RUN_COLUMNS)).items()},
                "gpu_name": r.gpu.name if r.gpu else None,
                "throughput_median": t.median if t else None,
                "throughput_ci95_low": t.ci95_low if t else None,
                "throughput_ci95_high": t.ci95_high if t else None,
                "throughput_cv": t.cv if t else None,
                "power_mean_w": telemetry.power_mean_w if telemetry else None,
                "energy_j_per_1000_samples": telemetry.energy_j_per_1000_samples if telemetry else None,
            }
            if r.kind == "watch":
                main = r.main
                row.update(
                    device=r.device,
                    backend=main.backend if main else None,
                    precision=main.precision_policy if main else None,
                    xla=(main.jit_compile or main.backend == "jax") if main else None,
                    compile_s=main.compile_s if main else None,
                    peak_memory_bytes=main.peak_memory_bytes if main else None,
                    flags=";".join(c.code for c in r.verdict),
                    verdict=r.verdict[0].message if r.verdict else None,
                )
            else:
                row["flags"] = ";".join(f.code for f in r.flags)
            writer.writerow(row)
        return out.getvalue()

    def comparisons(self, comparisons) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COMPARISON_COLUMNS)
        writer.writeheader()
        for c in comparisons:
            for g in c.groups:
                writer.writerow(
                    {
                        "workload": c.workload,
                        "by": c.by,
                        "group": g.label,
                        "runs": len(g.run_ids),
                        "basis": c.basis,
                        "value": g.value,
                        "ci95_low": g.ci95_low,
                        "ci95_high": g.ci95_high,
                        "ratio": g.ratio,
                        "ratio_low": g.ratio_low,
                        "ratio_high": g.ratio_high,
                        "p_value": g.p_value,
                        "test": g.test,
                        "verdict": g.verdict,
                    }
                )
        return buffer.getvalue()
