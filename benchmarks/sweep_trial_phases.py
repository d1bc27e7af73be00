"""Where a workload sweep's trials spend their time, from the stored records: per trial, the
trial's wall time, the measuring child's life, its first step (compilation), its warm-up, its
timed windows, and what the compilation cache gave it; then the sums. For docs/benchmarks.md.

    python benchmarks/sweep_trial_phases.py STORE.sqlite [STORE.sqlite ...]

Each store is read as a whole (the sweeps benchmarks/sweep_on_gpus.py ran into it).
"""

from __future__ import annotations

import json
import sqlite3
import sys


def main(paths: list[str]) -> int:
    for path in paths:
        with sqlite3.connect(path) as db:
            trials = db.execute("SELECT sweep, result_json FROM trials ORDER BY sweep, trial_index").fetchall()
            records = {rid: json.loads(text) for rid, text in db.execute("SELECT id, record_json FROM runs")}
        sums: dict[str, dict[str, float]] = {}
        print(f"# {path}")
        print(
            f"{'sweep':<16} {'config':<22} {'slot':<6} {'trial s':>8} {'child s':>8} {'compile s':>9} "
            f"{'warm-up s':>9} {'windows s':>9} {'cache':>8}"
        )
        for sweep, text in trials:
            result = json.loads(text) if text else None
            record = records.get(result.get("run_id")) if result else None
            if record is None:
                continue
            windows = sum(w["seconds"] for w in record["windows"])
            cache = record.get("compilation_cache")
            row = {
                "trial": result["duration_s"],
                "child": record["duration_s"],
                "compile": record["compile_s"] or 0.0,
                "warmup": record["warmup_s"] or 0.0,
                "windows": windows,
            }
            config = f"{record['precision']} b{record['batch_size']}"
            hits = f"{cache['hits']}/{cache['programs']}" if cache else "-"
            print(
                f"{sweep:<16} {config:<22} {result['slot']:<6} {row['trial']:>8.1f} {row['child']:>8.1f} "
                f"{row['compile']:>9.1f} {row['warmup']:>9.1f} {row['windows']:>9.1f} "
                f"{hits:>8}"
            )
            total = sums.setdefault(sweep, dict.fromkeys(row, 0.0) | {"n": 0})
            for key, value in row.items():
                total[key] += value
            total["n"] += 1
        for sweep, total in sums.items():
            n = total.pop("n")
            print(
                f"{sweep}: {n} trials, sums "
                + ", ".join(f"{k} {v:.1f} s" for k, v in total.items())
                + f"; outside the child {total['trial'] - total['child']:.1f} s, child outside compile, warm-up "
                f"and windows {total['child'] - total['compile'] - total['warmup'] - total['windows']:.1f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
