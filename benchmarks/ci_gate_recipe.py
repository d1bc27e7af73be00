"""docs/ci.md's GitHub Actions job, its `run:` lines as written, on this machine's GPU (issue 63:
"on a GPU, the CI recipe run as written").

    python benchmarks/ci_gate_recipe.py --out OUTDIR [--limit "--duration 20s"] [--runs 3] [--same 1]

Jobs of the recipe on one user script (OUTDIR/train.py, a small Keras CNN fed from memory), each
measuring --runs watched runs and exporting them: main's job keeps its file as the baseline;
--same pull requests that change nothing are gated against it (expected: exit 0); a pull request
that feeds the same training through a Python generator with 4 ms of work a batch is gated
(expected: exit 1, one FAIL line). Each job in a folder of its own, as a CI job's checkout is.
Writes OUTDIR/summary.json and prints a line a job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TRAIN = """
import os, time
import numpy as np
import keras

x = np.random.RandomState(0).rand(8192, 32, 32, 3).astype("float32")
y = np.random.RandomState(1).randint(0, 10, 8192)
model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10),
])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
if os.environ.get("REGRESSION"):  # the pull request: batches from a generator doing Python work
    def batches():
        while True:
            for i in range(0, 8192, 128):
                time.sleep(0.004)
                yield x[i:i + 128], y[i:i + 128]
    model.fit(batches(), steps_per_epoch=64, epochs=100, verbose=0)
else:
    model.fit(x, y, batch_size=128, epochs=100, verbose=0)
"""


def job(folder: Path, limit: str, runs: int, env: dict, gate_against: Path | None) -> dict:
    """One CI job: the recipe's `measure` step (RUNS watched runs, exported), and on a pull
    request its `gate` step against the baseline's file."""
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(TRAIN)
    gpuscout = f"{sys.executable} -m gpuscout"
    lines = [f"{gpuscout} watch {limit} --quiet --store run.sqlite -- {sys.executable} train.py"] * runs
    lines.append(f"{gpuscout} results export --store run.sqlite -o run.json")
    if gate_against is not None:
        (folder / "baseline").mkdir()
        shutil.copy(gate_against, folder / "baseline" / "run.json")
        lines.append(f"{gpuscout} compare baseline/run.json run.json --fail-slower 5")
    steps_run = []
    for line in lines:
        began = time.monotonic()
        done = subprocess.run(line, shell=True, cwd=folder, env=env, capture_output=True, text=True)
        seconds = round(time.monotonic() - began, 1)
        steps_run.append({"line": line, "exit": done.returncode, "s": seconds, "stdout": done.stdout[-2000:]})
        (folder / f"step{len(steps_run)}.stderr").write_text(done.stderr)
        if done.returncode != 0 and not line.startswith(f"{gpuscout} compare"):
            break
    measured = json.loads((folder / "run.json").read_text())["runs"]
    return {
        "samples_per_s": [r.get("samples_per_s") for r in measured],
        "gpu": (measured[0].get("gpu") or {}).get("name"),
        "steps": steps_run,
        "gate_exit": steps_run[-1]["exit"] if gate_against is not None else None,
        "gate_line": steps_run[-1]["stdout"].strip() if gate_against is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", default="--duration 20s", help="watch's limit, as the recipe gives it")
    parser.add_argument("--runs", type=int, default=3, help="watched runs a job, as the recipe measures")
    parser.add_argument("--same", type=int, default=1, help="pull requests that change nothing, each gated")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}
    baseline = args.out / "main" / "run.json"
    jobs = {"main": job(args.out / "main", args.limit, args.runs, env, None)}
    for i in range(args.same):
        jobs[f"pr_same{i + 1}"] = job(args.out / f"pr_same{i + 1}", args.limit, args.runs, env, baseline)
    jobs["pr_slower"] = job(args.out / "pr_slower", args.limit, args.runs, {**env, "REGRESSION": "1"}, baseline)
    (args.out / "summary.json").write_text(json.dumps({"limit": args.limit, **jobs}, indent=2))
    for name, j in jobs.items():
        rates = ", ".join(f"{r:,.0f}" for r in j["samples_per_s"] if r)
        print(f"{name}: {rates} samples/s, gate exit {j['gate_exit']}")
        if j["gate_line"]:
            print(f"  {j['gate_line']}")


if __name__ == "__main__":
    main()
