"""What the store's compilation cache (sweeps/.xla-cache, one for all of a store's sweeps) gives a
sweep run again: the same trials of benchmarks/sweep_user_cnn.py twice into one store, named
`cold` then `warm`, in one call. Per sweep: its wall time, its slot-seconds, and the parts of its
trials' time as benchmarks/trial_seconds.py splits them (before fit, fit's first step, the epochs,
the end), summed over the sweep's first wave and over the trials after it.

    KERAS_BACKEND=jax python benchmarks/sweep_store_cache.py --out OUT [--gpus 0] [--per-gpu 4]
        [--trials 8] [--epochs 3] [--cpu-slots N] [--small]

The warm sweep's trials find every program the cold one compiled (the learning rate is a variable
of SGD's, not a constant of the step); the cold sweep's own later trials load them too, so the
first wave is where the two differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from trial_seconds import parts  # noqa: E402  (the same split as the benchmark beside it)

LEARNING_RATES = [0.001, 0.003, 0.01, 0.03, 0.002, 0.005, 0.02, 0.05]


def run(out: Path, name: str, args: argparse.Namespace) -> dict:
    path = out / f"{name}.yaml"
    lrs = LEARNING_RATES[: args.trials]
    path.write_text(
        f"name: {name}\ncommand: {sys.executable} {HERE / 'sweep_user_cnn.py'} {{lr}} {args.epochs}"
        f"{' --small' if args.small else ''}\n"
        "reports: [val_accuracy]\nmetric: {name: val_accuracy, direction: max}\n"
        f"space: {{lr: [{', '.join(str(lr) for lr in lrs)}]}}\ntrials_per_gpu: {args.per_gpu}\n"
    )
    where = ["--cpu-slots", str(args.cpu_slots)] if args.cpu_slots else ["--gpus", args.gpus]
    store = out / "results.sqlite"
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", "sweep", str(path), *where, "--json", "--store", str(store)],
        capture_output=True, text=True, timeout=590, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    (out / f"{name}.stderr.txt").write_text(done.stderr[-100_000:])
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT result_json FROM trials WHERE sweep = ? ORDER BY trial_index", (name,)).fetchall()
    results = sorted((json.loads(text) for (text,) in rows), key=lambda r: r["started_monotonic_s"])
    slots = args.cpu_slots or args.per_gpu * len(args.gpus.split(","))
    waves = {"first wave": results[:slots], "after it": results[slots:]}
    split = {
        wave: {k: sum(parts(r)[k] for r in trials) for k in ("before_fit", "first_step", "epochs", "to_end")}
        for wave, trials in waves.items()
    }
    return {
        "wall_s": time.monotonic() - began,
        "slot_s": summary["trial_seconds_sum"],
        "waves": split,
        "trials": {wave: len(trials) for wave, trials in waves.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--per-gpu", type=int, default=4)
    parser.add_argument("--cpu-slots", type=int, help="CPU slots instead of GPUs")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="sweep_user_cnn.py's small model (a CPU smoke test)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {name: run(args.out, name, args) for name in ("cold", "warm")}
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2))
    print("| sweep | wall | slot-s | trials | before fit | first step | epochs | to the end |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        for wave, seconds in row["waves"].items():
            cells = " | ".join(f"{seconds[k]:.1f} s" for k in ("before_fit", "first_step", "epochs", "to_end"))
            print(f"| {name} | {row['wall_s']:.1f} s | {row['slot_s']:.0f} | {wave}: {row['trials'][wave]} | {cells} |")
    print(f"warm / cold slot-seconds: {rows['warm']['slot_s'] / rows['cold']['slot_s']:.2f}x")


if __name__ == "__main__":
    main()
