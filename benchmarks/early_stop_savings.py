"""Issue 64's measurement, rerun as it is: 16 random trials (learning rate x weight decay, seed 0)
of examples/sweeps/train.py (a Keras MLP on the digits) for 300 epochs on 4 CPU slots, once with
every trial run to its end and once with early stopping, in one call; slot-seconds, wall time,
pruned trials, and the best trial of each.

    python benchmarks/early_stop_savings.py --out OUT [--epochs 300] [--slots 4]
        [--rule "{kind: successive_halving, grace_epochs: 3, reduction_factor: 3}"]

The full sweep runs first; the early-stopped one is the candidate. Writes OUT/summary.json and
prints one line a sweep and the ratio.

Every sweep of a store shares one compilation cache (sweeps/.xla-cache), so without --prime the
full sweep compiles the first trials' programs and the sweeps after it load them: a comparison
that favours early stopping. --prime runs the 16 trials for one epoch first, so that every sweep
measured starts from the same warm cache. For both cold, give each sweep its own OUT.
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
SWEEP = """name: {name}
command: {python} {script} --lr {{lr:.3e}} --wd {{wd}} --epochs {epochs}
reports: [val_accuracy, val_loss]
metric: {{name: val_accuracy, direction: max}}
space:
  lr: {{loguniform: [1.0e-4, 1.0e-1]}}
  wd: {{choice: [0.0, 1.0e-4, 1.0e-3, 1.0e-2]}}
strategy: {{kind: random, trials: 16, seed: 0}}
timeout_s: 3600
"""


def sweep(out: Path, name: str, epochs: int, slots: int, rule: str | None) -> dict:
    path = out / f"{name}.yaml"
    text = SWEEP.format(
        name=name, python=sys.executable, script=HERE.parent / "examples/sweeps/train.py", epochs=epochs
    )
    path.write_text(text + (f"early_stop: {rule}\n" if rule else ""))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", "sweep", str(path), "--cpu-slots", str(slots), "--json", "--store",
         str(out / "results.sqlite")],
        capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")},
    )  # fmt: skip
    (out / f"{name}.stderr").write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    (out / f"{name}.json").write_text(done.stdout)
    return {
        "wall_s": time.monotonic() - began,
        "slot_s": summary["trial_seconds_sum"],
        "status": summary["status_counts"],
        "best": summary["best"][0],
        "early_stop": summary["early_stop"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--rule", default="{kind: successive_halving, grace_epochs: 3, reduction_factor: 3}")
    parser.add_argument(
        "--prime",
        action="store_true",
        help="first the same 16 trials for 1 epoch, so that every sweep after it finds the programs "
        "compiled in the store's shared cache, the full sweep as well as the early-stopped ones",
    )
    parser.add_argument("--peer", default="{kind: optuna_hyperband, grace_epochs: 3, reduction_factor: 3}",
                        help="a rule of Optuna's own on the same trials ('' for none)")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prime:
        sweep(args.out, "prime", 1, args.slots, None)
    full = sweep(args.out, "full", args.epochs, args.slots, None)
    stopped = sweep(args.out, "stopped", args.epochs, args.slots, args.rule)
    peer = sweep(args.out, "peer", args.epochs, args.slots, args.peer) if args.peer else None
    kept = stopped["best"]["params"] == full["best"]["params"]
    result = {"epochs": args.epochs, "slots": args.slots, "rule": args.rule, "full": full, "stopped": stopped,
              "peer_rule": args.peer, "peer": peer, "slot_ratio": stopped["slot_s"] / full["slot_s"],
              "peer_slot_ratio": peer["slot_s"] / full["slot_s"] if peer else None, "best_kept": kept}  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    for name, s in (("full", full), ("stopped", stopped), ("peer", peer)):
        if s is None:
            continue
        best = s["best"]
        print(
            f"{name}: {s['slot_s']:.0f} slot-s, wall {s['wall_s']:.0f} s, {s['status']}, best {best['value']:.4f} "
            f"(lr {best['params']['lr']:.3g}, wd {best['params']['wd']}, trial {best['index']})"
        )
    print(f"slot-seconds {result['slot_ratio']:.2f}x of the full sweep; its best trial kept: {kept}")
    if peer:
        print(f"the peer ({args.peer}): {result['peer_slot_ratio']:.2f}x")


if __name__ == "__main__":
    main()
