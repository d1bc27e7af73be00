"""`gpuscout watch` of a training that diverges on a GPU (issue 59, item 1), for docs/benchmarks.md,
in one call:

1. a user's script, a small vision Transformer in bf16 (Keras 3 on jax, AdamW, batch 256, uint8
   images in memory) whose learning rate a LearningRateScheduler raises to 1e4 at its fifth epoch,
   as a bad schedule does: watched as it is (`watch --json -- python vit_nan.py`), its record and
   verdict kept (the issue's drill ended here in a ValidationError and stored nothing);
2. what watch's per-window reading of the loss costs on this GPU: a jitted step's scalar loss
   read to the host (float()) after the step has been waited for, as the instrumentation does at
   a window's end, against the wait alone (block_until_ready), each 2,000 times.

    python benchmarks/watch_diverging_on_gpu.py --out OUTDIR

Writes the script, the run's output and the record under OUTDIR and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from user_input.small_vit import MODEL  # benchmarks/ is the script's folder

SCRIPT = (
    textwrap.dedent("""
    import os
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(12800, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 10, size=(12800,))

    dim, depth = 192, 4
""")
    + MODEL
    + textwrap.dedent("""
    model.compile(keras.optimizers.AdamW(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    # a schedule gone wrong: from the fifth epoch on, a learning rate of 1e4
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 1e-3 if epoch < 4 else 1e4)
    history = model.fit(x, y, batch_size=256, epochs=8, verbose=2, callbacks=[schedule])
    print("losses:", [round(v, 4) if v == v else v for v in history.history["loss"]])
""")
)

COST = textwrap.dedent("""
    import json, time
    import jax, jax.numpy as jnp
    w = jnp.ones((4096, 4096), jnp.bfloat16)

    @jax.jit
    def step(w):
        return w, jnp.mean((w @ w).astype(jnp.float32))

    w, loss = step(w)
    loss.block_until_ready()
    out = {}
    for name, read in (("wait alone", lambda l: l.block_until_ready()),
                       ("wait, then float(loss)", lambda l: float(l.block_until_ready()))):
        spent = 0.0
        for _ in range(2000):
            w, loss = step(w)
            loss.block_until_ready()          # the window's wait for its last step
            began = time.perf_counter()
            read(loss)
            spent += time.perf_counter() - began
        out[name] = spent / 2000 * 1e6
    out["device"] = str(jax.devices()[0].device_kind)
    print(json.dumps(out))
""")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    script = out / "vit_nan.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, KERAS_BACKEND="jax")
    began = time.monotonic()
    watched = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscout",
            "watch",
            "--json",
            "--store",
            str(out / "s.sqlite"),
            "--",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.monotonic() - began
    (out / "watch.stdout.txt").write_text(watched.stdout)
    (out / "watch.stderr.txt").write_text(watched.stderr[-200_000:])
    print(f"-- watch: exit {watched.returncode} in {wall:.0f} s", flush=True)
    cost = subprocess.run([sys.executable, "-c", COST], capture_output=True, text=True, env=env)
    (out / "cost.txt").write_text(cost.stdout + cost.stderr[-20_000:])
    rows = []
    try:
        record = json.loads(watched.stdout)["runs"][0]
        fit = record["fits"][0]
        first = record["verdict"][0]
        rows += [
            ("watch exit code", watched.returncode),
            ("record status", record["status"]),
            ("GPU", (record.get("gpu") or {}).get("name")),
            ("samples/s (steady windows)", round(record["samples_per_s"] or 0)),
            ("epoch losses", [e["logs"].get("loss") for e in fit["epochs"]]),
            ("diverged", fit["diverged"]),
            ("verdict 1", first["message"]),
            ("seen", first["evidence"]),
        ]
    except (ValueError, KeyError, IndexError) as exc:
        rows.append(("watch output unreadable", repr(exc)))
    try:
        rows += [
            (f"loss read: {k}", f"{v:.1f} us" if isinstance(v, float) else v)
            for k, v in json.loads(cost.stdout.strip().splitlines()[-1]).items()
        ]
    except (ValueError, IndexError) as exc:
        rows.append(("cost output unreadable", repr(exc)))
    for name, value in rows:
        print(f"{name:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
