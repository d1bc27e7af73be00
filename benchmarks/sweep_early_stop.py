"""Early stopping on a lent GPU (issue 33): the same 16-trial sweep of a user-style Keras image
script (benchmarks/sweep_user_cnn.py; 8 epochs; 4 of the 16 learning rates hopeless), once to the
end and once with successive halving, on each set of GPUs given, in one call; wall time,
GPU-hours, epochs run and the best val_accuracy of each:

    PYTHONPATH=src python benchmarks/sweep_early_stop.py --out OUT [--gpus 0 --gpus 0,1] [--per-gpu 2]
        [--grace 1] [--reduction 3] [--epochs 8] [--hyperband] [--median] [--no-halving]
        [--peer] [--cold] [--small] [--trials 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEARNING_RATES = [
    0.00001,
    0.00003,
    0.0001,
    0.00005,  # hopeless in 8 epochs
    0.001,
    0.002,
    0.003,
    0.005,
    0.007,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.07,
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", action="append", help="GPU indices of one pass (repeat: one pass each)")
    parser.add_argument("--grace", type=int, default=1, help="early_stop's grace_epochs")
    parser.add_argument("--reduction", type=int, default=3, help="early_stop's reduction_factor")
    parser.add_argument("--per-gpu", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--small", action="store_true", help="a CPU smoke test: 4 trials, 2 epochs, CPU slots")
    parser.add_argument("--trials", type=int, default=16, choices=range(1, 17), metavar="1..16",
                        help="N learning rates, spread over the 16")  # fmt: skip
    parser.add_argument("--peer", action="store_true", help="also Optuna's own pruners on the same trials")
    parser.add_argument("--hyperband", action="store_true", help="also gpuscout's hyperband (3 brackets)")
    parser.add_argument("--median", action="store_true", help="also gpuscout's median rule (--peer: Optuna's too)")
    parser.add_argument("--no-halving", action="store_true", help="leave successive halving out")
    parser.add_argument("--cold", action="store_true", help="also halving with every trial its own interpreter")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.sqlite"
    spread = LEARNING_RATES[:: len(LEARNING_RATES) // args.trials][: args.trials]  # 8: every other one
    lrs = LEARNING_RATES[2:6] if args.small else spread
    epochs = 2 if args.small else args.epochs
    rows = []
    halving = (
        f"early_stop: {{kind: successive_halving, grace_epochs: {args.grace}, reduction_factor: {args.reduction}}}\n"
    )
    rules = [("to-the-end", "")] + ([] if args.no_halving else [("halving", halving)])
    if args.median:  # the median rule, and with --peer Optuna's MedianPruner after it
        rules.append(("median", f"early_stop: {{kind: median, grace_epochs: {args.grace}}}\n"))
        if args.peer:
            rules.append(("optuna-median", f"early_stop: {{kind: optuna_median, grace_epochs: {args.grace}}}\n"))
    if args.hyperband:  # brackets of the same halving, each judged from a later first rung
        rules.append(("hyperband", halving.replace("successive_halving", "hyperband")))
    if args.peer and (args.hyperband or not args.no_halving):  # Optuna's own on the same trials (issue 64's peer)
        rules.append(("optuna-hyperband", f"early_stop: {{kind: optuna_hyperband, grace_epochs: {args.grace}, "
                      f"reduction_factor: {args.reduction}}}\n"))  # fmt: skip
    if args.cold:  # what the warm interpreter (executor/warm.py) gives, on the same trials
        rules.append(("halving-cold", halving + "warm_start: false\n"))
    passes = [(gpus, kind, early) for gpus in (args.gpus or ["0"]) for kind, early in rules]
    for gpus, kind, early in passes:
        name = f"{kind}-gpus{gpus.replace(',', '')}"
        sweep = args.out / f"{name}.yaml"
        sweep.write_text(
            f"name: {name}\ncommand: {sys.executable} {HERE / 'sweep_user_cnn.py'} {{lr}} {epochs}"
            f"{' --small' if args.small else ''}\n"
            "reports: [val_accuracy]\nmetric: {name: val_accuracy, direction: max}\n"
            f"space: {{lr: [{', '.join(format(lr, 'f') for lr in lrs)}]}}\n"
            f"trials_per_gpu: {args.per_gpu}\n{early}"
        )
        where = ["--cpu-slots", "2"] if args.small else ["--gpus", gpus]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "gpuscout", "sweep", str(sweep), *where, "--json", "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=590,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        (args.out / f"{name}.json").write_text(done.stdout)
        (args.out / f"{name}.stderr.txt").write_text(done.stderr[-100_000:])
        try:
            s = json.loads(done.stdout)
        except ValueError:
            print(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}", flush=True)
            continue
        stop = s.get("early_stop") or {}
        rows.append(
            f"| {kind} | {gpus} | {s['status_counts']} | {s['wall_s']:.1f} s | {s['trial_seconds_sum']:.0f} s | "
            f"{s['gpu_hours']:.4f} | "
            f"{stop.get('epochs_run', len(lrs) * epochs)} of {len(lrs) * epochs} | "
            f"{s['best'][0]['value']:.4f} (lr {s['best'][0]['params']['lr']}) | "
            f"{stop.get('best_rank_at_rungs', '')} | {(s.get('warm_start') or {}).get('trials', 0)} |"
        )
        print(f"{name}: {time.monotonic() - started:.0f} s", flush=True)
    print(
        "\n| sweep | GPUs | trials | wall | slot-s | GPU-hours | epochs run | best val_accuracy | best's ranks | warm |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
