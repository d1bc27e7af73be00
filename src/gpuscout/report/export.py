"""Machine-readable output: JSON documents and flat CSV rows."""

from __future__ import annotations

import csv
import io
import json

from gpuscout import __version__
from gpuscout.store import SCHEMA_VERSION

CSV_COLUMNS = (
    "id", "created_utc", "group_id", "workload", "backend", "precision", "xla", "batch_size",
    "seq_len", "data", "device", "gpu_name", "status", "unit", "throughput_median", "throughput_ci95_low",
    "throughput_ci95_high", "throughput_cv", "samples_per_s", "step_time_s", "epoch_time_s", "compile_s",
    "peak_memory_bytes", "achieved_tflops", "mfu", "power_mean_w", "energy_j_per_1000_samples",
    "flags", "methodology_version",
)


def json_document(records: list[dict], **extra) -> str:
    return json.dumps({"gpuscout_version": __version__, "schema_version": SCHEMA_VERSION,
                       **extra, "runs": records}, indent=2)


def csv_text(records: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for r in records:
        t = r.get("throughput") or {}
        telemetry = r.get("telemetry") or {}
        writer.writerow({
            **{k: r.get(k) for k in CSV_COLUMNS if k in r},
            "gpu_name": (r.get("gpu") or {}).get("name"),
            "throughput_median": t.get("median"), "throughput_ci95_low": t.get("ci95_low"),
            "throughput_ci95_high": t.get("ci95_high"), "throughput_cv": t.get("cv"),
            "power_mean_w": telemetry.get("power_mean_w"),
            "energy_j_per_1000_samples": telemetry.get("energy_j_per_1000_samples"),
            "flags": ";".join(f["code"] for f in r.get("flags", [])),
        })
    return out.getvalue()
