"""`gpuscout tune -- COMMAND` of a script left in debugging settings (issue 60, case 1), beside the
fix made by hand, in one call:

1. a user's script, a small vision Transformer (Keras 3 on jax, 4 blocks of 192 on 8x8 patches of
   32x32 uint8 images held in memory) left with jit_compile=False, float32 and batch 32, watched as
   it is (`watch --duration`): the pace the user starts from;
2. `gpuscout tune --json -- python vit_debug.py` at the default budget (6 minutes), unchanged;
3. the fix by hand, watched the same way: XLA, mixed_bfloat16 and batch 256 (the issue's), the
   same with batch 1,024, and XLA in float32 at batch 1,024; a fix whose loss went NaN is shown and
   not compared.

    python benchmarks/tune_debug_settings.py --out OUTDIR [--budget MINUTES] [--small] [--mlp] [--hand-only]

`--mlp`: the issue's CPU case instead, an MLP (64-256-256-2) on 20,000 in-memory samples left at
batch 16 without XLA; the fix by hand is XLA at batch 256 and 1,024 (float32: a CPU has no
tensor cores).

Writes the script, tune's report and every run's output under OUTDIR and prints a short table
last: tune's best against the fix by hand, and its session's wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

from gpuscout_cli import DIVERGED, gpuscout, print_beside, watched  # benchmarks/ is the script's folder
from user_input.small_vit import MODEL

SCRIPT = (
    textwrap.dedent("""
    import os
    import sys
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import numpy as np

    # the settings a user debugged with, and left: python vit_debug.py [JIT] [POLICY] [BATCH]
    jit = (sys.argv[1] == "xla") if len(sys.argv) > 1 else False
    policy = sys.argv[2] if len(sys.argv) > 2 else "float32"
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    small = os.environ.get("SMALL") == "1"
    keras.mixed_precision.set_global_policy(policy)
    rng = np.random.default_rng(0)
    n = 2048 if small else 51200
    x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 10, size=(n,))
    dim, depth = (64, 1) if small else (192, 4)

""")
    + MODEL
    + textwrap.dedent("""
    model.compile(keras.optimizers.AdamW(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=jit)
    model.fit(x, y, batch_size=batch, epochs=1000, verbose=0)
""")
)


MLP_SCRIPT = textwrap.dedent("""
    import os
    import sys
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import numpy as np

    # the settings a user debugged with, and left: python mlp_debug.py [JIT] [POLICY] [BATCH]
    jit = (sys.argv[1] == "xla") if len(sys.argv) > 1 else False
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, 64)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    model.fit(x, y, batch_size=batch, epochs=1000, verbose=0)
""")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", default=None, help="tune's --budget-minutes [default: tune's own]")
    parser.add_argument("--watch-seconds", type=int, default=25)
    parser.add_argument("--small", action="store_true", help="a one-block model on 2,048 images (a CPU rehearsal)")
    parser.add_argument("--mlp", action="store_true", help="the issue's CPU case: an MLP at batch 16, no XLA")
    parser.add_argument("--hand-only", action="store_true", help="the fixes by hand alone (no as-left run, no tune)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    script = out / ("mlp_debug.py" if args.mlp else "vit_debug.py")
    script.write_text(MLP_SCRIPT if args.mlp else SCRIPT)
    policy = "float32" if args.mlp else "mixed_bfloat16"
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", **({"SMALL": "1"} if args.small else {}))
    store = str(out / "s.sqlite")
    watch = ["watch", "--json", "--duration", f"{args.watch_seconds}s", "--store", store, "--"]
    rows, report, wall = {}, None, 0.0
    if not args.hand_only:
        left, _ = gpuscout([*watch, sys.executable, str(script)], out, "as-left", env, 300)
        rows[f"as left (no XLA, float32, batch {16 if args.mlp else 32})"] = watched(left)[0]
        budget = ["--budget-minutes", args.budget] if args.budget else []
        report, wall = gpuscout(
            ["tune", "--json", *budget, "--store", store, "--", sys.executable, str(script)], out, "tune", env, 560
        )
        rows["tune's best"] = ((report or {}).get("best") or {}).get("samples_per_s")
    # float32 at the largest batch too: on an H200 the ViT's loss went NaN in mixed_bfloat16 by hand
    # as in tune's own run (docs/benchmarks.md), and a diverged run is no fix to compare with
    hand = [(policy, 256), (policy, 1024)] + ([("float32", 1024)] if policy != "float32" else [])
    for precision, batch in hand:
        made, _ = gpuscout(
            [*watch, sys.executable, str(script), "xla", precision, str(batch)],
            out,
            f"by-hand-{precision}-{batch}",
            env,
            300,
        )
        rate, diverged = watched(made)
        rows[f"by hand: XLA, {precision}, batch {batch}" + (DIVERGED if diverged else "")] = rate
    print_beside(rows, report, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
