"""docs/ci.md's GitHub Actions job, its `run:` lines as written, on this machine's GPU (issue 63:
"on a GPU, the CI recipe run as written").

    python benchmarks/ci_gate_recipe.py --out OUTDIR [--steps 300]

Three jobs of the recipe on one user script (OUTDIR/train.py, a small Keras CNN fed from memory):
main's job keeps its run as the baseline; a pull request that changes nothing is gated against it
(expected: exit 0, or 3 where the runs are too short to test); a pull request that feeds the
same training through a Python generator with 4 ms of work a batch is gated (expected: exit 1,
one FAIL line). Each job in a folder of its own, as a CI job's checkout is; `jq` as in the
recipe where the machine has it, else the same query in Python. Writes OUTDIR/summary.json and
prints it.
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


# the recipe's `jq -r '.runs[0].id' FILE`; the same query in Python where the machine has no jq
PY_QUERY = "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]['id'])"


def _run_id(file: str) -> str:
    return (
        f"\"$(jq -r '.runs[0].id' {file})\"" if shutil.which("jq") else f'"$({sys.executable} -c "{PY_QUERY}" {file})"'
    )


def job(folder: Path, steps: int, env: dict, gate_against: Path | None) -> dict:
    """One CI job: measure (the recipe's `measure` step), and on a pull request the `gate` step."""
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(TRAIN)
    gpuscout = f"{sys.executable} -m gpuscout"
    lines = [f"{gpuscout} watch --steps {steps} --json --store run.sqlite -- {sys.executable} train.py > run.json"]
    if gate_against is not None:
        (folder / "baseline").mkdir()
        shutil.copy(gate_against, folder / "baseline" / "run.json")
        lines += [
            f"{gpuscout} results import baseline/run.json --store ci.sqlite",
            f"{gpuscout} results import run.json --store ci.sqlite",
            f"{gpuscout} compare {_run_id('baseline/run.json')} {_run_id('run.json')} --fail-slower 5 "
            "--store ci.sqlite",
        ]
    steps_run = []
    for line in lines:
        began = time.monotonic()
        done = subprocess.run(line, shell=True, cwd=folder, env=env, capture_output=True, text=True)
        steps_run.append(
            {
                "line": line,
                "exit": done.returncode,
                "s": round(time.monotonic() - began, 1),
                "stdout": done.stdout[-2000:],
            }
        )
        (folder / f"step{len(steps_run)}.stderr").write_text(done.stderr)
        if done.returncode != 0 and not line.startswith(f"{gpuscout} compare"):
            break
    run = json.loads((folder / "run.json").read_text())["runs"][0]
    return {
        "samples_per_s": run.get("samples_per_s"),
        "steady_windows": sum(1 for w in run.get("windows", []) if not w.get("traced")) - run.get("warmup_windows", 0),
        "gpu": (run.get("gpu") or {}).get("name"),
        "steps": steps_run,
        "gate_exit": steps_run[-1]["exit"] if gate_against is not None else None,
        "gate_line": steps_run[-1]["stdout"].strip() if gate_against is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}
    main_job = job(args.out / "main", args.steps, env, None)
    same = job(args.out / "pr_same", args.steps, env, args.out / "main" / "run.json")
    slower = job(args.out / "pr_slower", args.steps, {**env, "REGRESSION": "1"}, args.out / "main" / "run.json")
    summary = {"steps": args.steps, "main": main_job, "pr_same": same, "pr_slower": slower}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, j in (("main", main_job), ("pr_same", same), ("pr_slower", slower)):
        print(
            f"{name}: {j['samples_per_s']} samples/s, {j['steady_windows']} steady windows, gate exit {j['gate_exit']}"
        )
        if j["gate_line"]:
            print(f"  {j['gate_line']}")


if __name__ == "__main__":
    main()
