"""Where a sweep's trial-seconds went, trial by trial, from what the sweep stored: the wait before
the script's fit began (its interpreter's start or the warm interpreter's fork, its imports, the
data and the model), fit's first step (trace and compile), the epochs after it, and the time from
the last epoch to the trial's end (the pruner's verdict, the interpreter's end).

    python benchmarks/trial_seconds.py STORE SWEEP

STORE is the sweep's store (--store), SWEEP its name; the trials' event logs are read from their
folders. One line a trial, then the sums.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path


def parts(result: dict) -> dict[str, float]:
    events = [json.loads(line) for line in (Path(result["log_dir"]) / "events-1.jsonl").open()]
    began = next(e["began_monotonic_s"] for e in events if e["event"] == "watch_fit_begin")
    fit = next(e for e in events if e["event"] == "watch_fit")
    last_epoch = [e for e in events if e["event"] == "watch_epoch"][-1]["end_monotonic_s"]
    first_step_end = fit["started_monotonic_s"] + fit["compile_s"]
    return {
        "before_fit": began - result["started_monotonic_s"],
        "first_step": first_step_end - began,
        "epochs": last_epoch - first_step_end,
        "to_end": result["ended_monotonic_s"] - last_epoch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path)
    parser.add_argument("sweep")
    args = parser.parse_args()
    with sqlite3.connect(args.store) as db:
        rows = db.execute(
            "SELECT trial_index, status, result_json FROM trials WHERE sweep = ? ORDER BY trial_index", (args.sweep,)
        ).fetchall()
    results = [(index, status, json.loads(text)) for index, status, text in rows]
    t0 = min(r["started_monotonic_s"] for _, _, r in results)
    sums: dict[str, float] = {}
    print("trial status  start_s before_fit first_step epochs to_end total_s epochs_run")
    for index, status, result in results:
        split = parts(result)
        for name, seconds in split.items():
            sums[name] = sums.get(name, 0.0) + seconds
        epochs = len(result.get("history") or [])
        cells = " ".join(f"{v:10.2f}" for v in split.values())
        start_s = result["started_monotonic_s"] - t0
        print(f"{index:5d} {status:7s} {start_s:7.1f} {cells} {result['duration_s']:7.2f} {epochs:5d}")
    print(
        "sum:", ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sums.items()), f"(of {sum(sums.values()):.1f})"
    )


if __name__ == "__main__":
    main()
