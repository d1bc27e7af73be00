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


# What every record must carry to be stored and compared (store/sqlite.py indexes these).
REQUIRED_FIELDS = ("id", "created_utc", "group_id", "workload", "backend", "precision", "xla", "batch_size",
                   "data", "device", "status", "methodology_version", "schema_version")


def parse_document(text: str, origin: str) -> list[dict]:
    """The records of a gpuscout JSON document (as `results export` writes it), checked whole
    before anything is stored: UsageError names the first problem."""
    from gpuscout.errors import UsageError

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{origin} is not JSON ({exc.msg}, line {exc.lineno}): not a gpuscout results file") from None
    if not isinstance(doc, dict) or "runs" not in doc or "schema_version" not in doc:
        raise UsageError(f"{origin} is not a gpuscout results file (no 'runs' and 'schema_version'): "
                         "write one with `gpuscout results export`")
    if not isinstance(doc["schema_version"], int) or doc["schema_version"] > SCHEMA_VERSION:
        raise UsageError(f"{origin} has results schema {doc['schema_version']}, newer than this gpuscout's "
                         f"({SCHEMA_VERSION}): upgrade gpuscout to import it")
    runs = doc["runs"]
    if not isinstance(runs, list):
        raise UsageError(f"{origin}: 'runs' must be a list of records")
    for index, record in enumerate(runs):
        missing = [f for f in REQUIRED_FIELDS if not isinstance(record, dict) or f not in record]
        if missing:
            raise UsageError(f"{origin}: run #{index + 1} lacks {', '.join(missing)}: nothing was imported")
        if record["schema_version"] > SCHEMA_VERSION:
            raise UsageError(f"{origin}: run {record['id']} has schema {record['schema_version']}, newer than "
                             f"{SCHEMA_VERSION}: upgrade gpuscout to import it")
    ids = [r["id"] for r in runs]
    if len(ids) != len(set(ids)):
        raise UsageError(f"{origin} holds the same run id twice: nothing was imported")
    return runs


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
