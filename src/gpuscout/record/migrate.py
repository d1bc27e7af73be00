"""Older stored shapes of a record, brought to this schema (`gpuscout results migrate`, and
`results import` of an older export).

Schema 1 (gpuscout 0.1.0 before the typed record) kept the inference fields (format, variant,
latency, ...) at the top level, cost keys named after the unit (usd_per_million_images), and no
`units_per_sample` (readers divided two figures for it).
"""

from __future__ import annotations

import copy

from gpuscout.record.run import SCHEMA_VERSION

_INFERENCE_KEYS = {
    "format": "format",
    "variant": "variant",
    "inference_flops_per_sample": "flops_per_sample",
    "latency": "latency",
    "load_test": "load_test",
    "input_path": "input_path",
    "serving": "serving",
    "agreement": "agreement",
    "trained_on": "trained_on",
}


class MigrationError(ValueError):
    """A record this gpuscout cannot bring to its schema."""


def upgrade(record: dict, version: int) -> dict:
    """A copy of `record`, stored at schema `version`, in this schema's shape."""
    if version > SCHEMA_VERSION:
        raise MigrationError(f"schema {version} is newer than this gpuscout's ({SCHEMA_VERSION})")
    out = copy.deepcopy(record)
    if version < 2:
        out = _v1_to_v2(out)
    return out


def _v1_to_v2(r: dict) -> dict:
    r["kind"] = "benchmark"
    r["mode"] = r.get("mode") or "training"
    moved = {new: r.pop(old, None) for old, new in _INFERENCE_KEYS.items()}
    r["inference"] = moved if r["mode"] == "inference" else None
    throughput = r.get("throughput") or {}
    if throughput.get("median") and r.get("samples_per_s"):
        r["units_per_sample"] = max(1, round(throughput["median"] / r["samples_per_s"]))
    else:
        r["units_per_sample"] = (r.get("seq_len") or 1) if str(r.get("unit", "")).startswith("tokens") else 1
    cost = r.get("cost")
    if cost:
        for key in list(cost):
            if key.startswith("usd_per_million_"):
                cost["usd_per_million_units"] = cost.pop(key)
            elif key.startswith("kwh_per_million_"):
                cost["kwh_per_million_units"] = cost.pop(key)
    r["schema_version"] = 2
    return r
