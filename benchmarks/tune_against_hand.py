"""`gpuscout tune -- COMMAND` of a user's script beside the fix made by hand, in one call (issue 60):

- `augmenting_images` (item 3): a ResNet-50 fed by a PyDataset whose augment() cuts, flips and
  normalises each image in Keras' default one worker thread; by hand: the crops cut on the host as
  uint8, the flip and the normalisation as Keras layers in the model, mixed_bfloat16;
- `inline_augmenting` (issue 77): the same ResNet-50, its crop, flip and normalisation written inline
  in __getitem__'s loop; by hand: the uint8 images handed as stored, the three as layers (float32);
- `tfdata_augmenting` (issue 77, the tf.data form; TensorFlow backend, so the CPU: the lent GPU
  machines carry no TensorFlow): a small CNN fed by a tf.data map that crops, flips and normalises
  each element; by hand: the map left out, the three as layers;
- `two_input_generator` (case 1's second script): a two-input CNN with its own train_step fed
  float32 by a plain generator; by hand: the generator read ahead in a thread, mixed_bfloat16.

1. `gpuscout tune --json --patch P -- python SCRIPT` at the default budget, unchanged (the patch
   applied to a copy of the script and run);
2. the fix by hand, watched (`watch --duration`).

    python benchmarks/tune_against_hand.py --out OUTDIR [--script NAME] [--budget MINUTES] [--small]

Writes tune's report and every run's output under OUTDIR and prints a short table last: tune's best
against the fix by hand, its path, and its session's wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuscout_cli import DIVERGED, gpuscout, print_beside, watched  # benchmarks/ is the script's folder

USER_INPUT = Path(__file__).resolve().parent / "user_input"
# each script's argument for its fix by hand, and what that fix is
BY_HAND = {
    "augmenting_images": ("by-hand", "uint8 crops, layers, bf16"),
    "two_input_generator": ("hand", "read ahead, bf16"),
    "inline_augmenting": ("by-hand", "uint8 images, crop/flip/normalise layers"),
    "tfdata_augmenting": ("by-hand", "the map left out, normalise/flip/crop layers"),
}
# the backend each script is measured on: tf.data's own is TensorFlow
BACKEND = {"tfdata_augmenting": "tensorflow"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--script", choices=sorted(BY_HAND), default="augmenting_images")
    parser.add_argument("--budget", default=None, help="tune's --budget-minutes [default: tune's own]")
    parser.add_argument("--watch-seconds", type=int, default=25)
    parser.add_argument("--small", action="store_true", help="a small model (a CPU rehearsal)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    script = USER_INPUT / f"{args.script}.py"
    hand_arg, hand_label = BY_HAND[args.script]
    small = {"SMALL": "1"} if args.small else {}
    env = dict(os.environ, KERAS_BACKEND=BACKEND.get(args.script, "jax"), TF_CPP_MIN_LOG_LEVEL="3", **small)
    store = str(out / "s.sqlite")
    budget = ["--budget-minutes", args.budget] if args.budget else []
    report, wall = gpuscout(
        [
            "tune",
            "--json",
            *budget,
            "--patch",
            str(out / "tune.patch"),
            "--store",
            store,
            "--",
            sys.executable,
            str(script),
        ],
        out,
        "tune",
        env,
        560,
    )
    hand, _ = gpuscout(
        [
            "watch",
            "--json",
            "--duration",
            f"{args.watch_seconds}s",
            "--store",
            store,
            "--",
            sys.executable,
            str(script),
            hand_arg,
        ],
        out,
        "by-hand",
        env,
        300,
    )
    rate, diverged = watched(hand)
    rows = {
        "as left (tune's baseline)": ((report or {}).get("baseline") or {}).get("samples_per_s"),
        "tune's best": ((report or {}).get("best") or {}).get("samples_per_s"),
        "tune's patched copy": ((report or {}).get("patched") or {}).get("samples_per_s"),
        f"by hand: {hand_label}" + (DIVERGED if diverged else ""): rate,
    }
    print_beside(rows, report, wall, each_row=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
