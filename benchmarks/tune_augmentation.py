"""`gpuscout tune -- COMMAND` of a script whose PyDataset augments each image on the host (issue 60,
item 3: benchmarks/user_input/augmenting_images.py, a ResNet-50 fed by an ImageNet-style augment()
in Keras' default one worker thread), beside the fix made by hand, in one call:

1. `gpuscout tune --json --patch P -- python augmenting_images.py` at the default budget, unchanged
   (the patch applied to a copy of the script and run);
2. the fix by hand, watched (`watch --duration`): the crops cut on the host as uint8, the flip and
   the normalisation as Keras layers in the model (on the device), mixed_bfloat16.

    python benchmarks/tune_augmentation.py --out OUTDIR [--budget MINUTES] [--small]

Writes tune's report and every run's output under OUTDIR and prints a short table last: tune's best
against the fix by hand, its path, and its session's wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuscout_cli import gpuscout, print_beside  # benchmarks/ is the script's folder

SCRIPT = Path(__file__).resolve().parent / "user_input" / "augmenting_images.py"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", default=None, help="tune's --budget in minutes [default: tune's own]")
    parser.add_argument("--watch-seconds", type=int, default=25)
    parser.add_argument("--small", action="store_true", help="a small CNN on 40x40 crops (a CPU rehearsal)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", **({"SMALL": "1"} if args.small else {}))
    store = str(out / "s.sqlite")
    budget = ["--budget", args.budget] if args.budget else []
    report, wall = gpuscout(["tune", "--json", *budget, "--patch", str(out / "tune.patch"), "--store", store, "--",
                             sys.executable, str(SCRIPT)], out, "tune", env, 560)
    hand, _ = gpuscout(["watch", "--json", "--duration", f"{args.watch_seconds}s", "--store", store, "--",
                        sys.executable, str(SCRIPT), "by-hand"], out, "by-hand", env, 300)
    rows = {"as left (tune's baseline)": ((report or {}).get("baseline") or {}).get("samples_per_s"),
            "tune's best": ((report or {}).get("best") or {}).get("samples_per_s"),
            "tune's patched copy": ((report or {}).get("patched") or {}).get("samples_per_s"),
            "by hand: uint8 crops, layers, bf16": hand["runs"][0]["samples_per_s"] if hand else None}
    print_beside(rows, report, wall, each_row=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
