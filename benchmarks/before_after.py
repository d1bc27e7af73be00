"""Two source trees of gpuscout measuring the same runs on the same GPU, alternated: what a
refactor did to the numbers (for docs/benchmarks.md). Each tree runs with its own store.

    python benchmarks/before_after.py --before .carry/base/src --after src --out OUTDIR \\
        --run "resnet50 --backend jax --precision mixed_bfloat16 --batch-size 256" \\
        --run "--suite quick --backend jax --precision mixed_bfloat16"

Each --run is given to `gpuscout bench ... --json` by each tree in turn (before, after; then the
next run after, before, so that neither always goes first); `--also LABEL=TREE` adds trees
between the two (steps of one change, measured in the same call). Prints, per workload, each
tree's median throughput, its window CV, its ratio to before, and its allocator peak.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path


def bench(tree: Path, args: list[str], store: Path, out: Path, name: str) -> list[dict]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tree.resolve()), os.environ.get("PYTHONPATH", "")]),
        GPUSCOUT_STORE=str(store),
        JAX_COMPILATION_CACHE_DIR="/tmp/gpuscout-jax-cache",
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscout", "bench", *args, "--json"], capture_output=True, text=True, env=env
    )
    (out / f"{name}.json").write_text(proc.stdout)
    (out / f"{name}.stderr.txt").write_text(proc.stderr[-100_000:])
    print(f"-- {name}: exit {proc.returncode} in {time.monotonic() - began:.0f} s", flush=True)
    try:
        return json.loads(proc.stdout)["runs"]
    except (ValueError, KeyError):
        return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="LABEL=TREE",
        help="another tree measured in the same rotation (an intermediate step), against before",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", action="append", required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = [
        ("before", args.before),
        *((label, Path(tree)) for label, _, tree in (also.partition("=") for also in args.also)),
        ("after", args.after),
    ]
    results: dict[str, dict[str, dict]] = {}
    for index, run in enumerate(args.run):
        for label, tree in trees if index % 2 == 0 else trees[::-1]:  # neither always goes first
            for record in bench(tree, shlex.split(run), args.out / f"{label}.sqlite", args.out, f"{label}-{index}"):
                key = f"{record['workload']} b{record['batch_size']}"
                results.setdefault(key, {})[label] = record
    print(f"\n{'run':24} {'tree':>10} {'median':>14} {'CV':>7} {'/ before':>9}  peak GiB  status")
    for key, by_label in results.items():
        before = ((by_label.get("before") or {}).get("throughput") or {}).get("median")
        for label, _ in trees:
            record = by_label.get(label) or {}
            throughput = record.get("throughput") or {}
            ratio = throughput["median"] / before if before and throughput.get("median") else None
            print(
                f"{key:24} {label:>10} {throughput.get('median') or 0:14,.1f} "
                f"{100 * (throughput.get('cv') or 0):6.2f}% "
                f"{'' if ratio is None else f'{ratio:.4f}':>9}  {_gib(record):>8}  {record.get('status')}"
            )
    return 0


def _gib(record: dict) -> str:
    peak = record.get("peak_memory_bytes")
    return "-" if peak is None else f"{peak / 2**30:.2f}"


if __name__ == "__main__":
    sys.exit(main())
