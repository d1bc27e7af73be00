"""Issue 46 on a lent GPU: what `%%gpuscout watch` costs a GPU-bound `fit` in a real Jupyter kernel.

One notebook, run by nbclient in a fresh ipykernel (Keras on jax): a model whose step is all matmuls
on arrays already on the GPU, compiled and warmed up once, then the same `fit` alternately as a
plain cell and under `%%gpuscout watch` (ABAB..., PAIRS pairs). Each cell times its `fit` itself
(time.perf_counter around it, after a device synchronisation), so the plain and the watched figure
are the training's own time; the watched cell's wall time also includes deriving, storing and
drawing the verdict, reported apart. The overhead is the median of the per-pair ratios, with a
bootstrap 95% CI. Prints one JSON line last.

    PYTHONPATH=src python benchmarks/notebook_overhead.py --out OUT [--pairs 6] [--steps 50 --epochs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

SETUP = """
import os, time, json
os.environ["KERAS_BACKEND"] = "jax"
import jax, jax.numpy as jnp, keras
WIDTH, BATCH, STEPS, EPOCHS = {width}, {batch}, {steps}, {epochs}
keras.mixed_precision.set_global_policy("mixed_bfloat16")
inputs = keras.Input((WIDTH,))
h = inputs
for _ in range(6):
    h = keras.layers.Dense(WIDTH, activation="relu")(h)
model = keras.Model(inputs, keras.layers.Dense(10)(h))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (BATCH * STEPS, WIDTH), dtype=jnp.float32)
y = jax.random.randint(key, (BATCH * STEPS,), 0, 10)
def timed_fit():
    jax.block_until_ready(x)
    start = time.perf_counter()
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    float(history.history["loss"][-1])  # the last step done
    return time.perf_counter() - start
timed_fit()  # compile and warm up
times = {{"plain": [], "watched": []}}
"""


def notebook(pairs: int, store: str, width: int, batch: int, steps: int, epochs: int):
    import nbformat

    cells = [SETUP.format(width=width, batch=batch, steps=steps, epochs=epochs), "%load_ext gpuscout"]
    for _ in range(pairs):
        cells.append("times['plain'].append(timed_fit())")
        cells.append(f"%%gpuscout watch --store {store} --label overhead\ntimes['watched'].append(timed_fit())")
    cells.append("print('TIMES', json.dumps(times))")
    made = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    made.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return made


def bootstrap(ratios: list[float], draws: int = 10_000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws)]


def main() -> None:
    from nbclient import NotebookClient

    from gpuscout.measure import notebook_runner as runner

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch (the arrays on the GPU hold these)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = str(args.out / "results.sqlite")
    made = notebook(args.pairs, store, args.width, args.batch, args.steps, args.epochs)
    client = NotebookClient(made, timeout=1800, resources={"metadata": {"path": str(args.out)}})
    runner.over_ipc(client)
    started = time.perf_counter()
    client.execute(env=dict(os.environ))
    wall = time.perf_counter() - started
    cell_walls = {"plain": [], "watched": []}  # the cells' own wall time, by Jupyter's timing metadata
    for cell in made.cells[2:-1]:
        timing = cell.metadata.get("execution", {})
        began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if began and ended:
            from datetime import datetime

            seconds = (
                datetime.fromisoformat(ended.rstrip("Z")) - datetime.fromisoformat(began.rstrip("Z"))
            ).total_seconds()
            cell_walls["watched" if cell.source.startswith("%%gpuscout") else "plain"].append(seconds)
    printed = "".join(o.get("text", "") for o in made.cells[-1].outputs if o.get("output_type") == "stream")
    times = json.loads(printed.split("TIMES", 1)[1])
    ratios = [w / p for p, w in zip(times["plain"], times["watched"])]
    low, high = bootstrap(ratios)
    samples = args.batch * args.steps * args.epochs
    from gpuscout.store import Store

    with Store(store, create=False) as opened:
        records = opened.list(kind="watch")
    busy = [r.telemetry.gpu_util_mean_pct for r in records if r.telemetry and r.telemetry.gpu_util_mean_pct]
    result = {
        "pairs": args.pairs,
        "steps": args.steps * args.epochs,
        "batch": args.batch,
        "width": args.width,
        "plain_s": times["plain"],
        "watched_s": times["watched"],
        "plain_samples_per_s": samples / statistics.median(times["plain"]),
        "watched_samples_per_s": samples / statistics.median(times["watched"]),
        "overhead_median": statistics.median(ratios) - 1,
        "overhead_ci95": [low - 1, high - 1],
        "cell_wall_s": {k: statistics.median(v) if v else None for k, v in cell_walls.items()},
        "watched_records": len(records),
        "gpu_busy_pct": busy,
        "verdicts": [[c.code for c in r.verdict][:2] for r in records],
        "wall_s": wall,
    }
    (args.out / "overhead.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
