"""Time gpuscout's own cost around a benchmark: `gpuscout --help`, and a `gpuscout bench` run's
wall time outside its measuring child (the parent's imports, provenance, statistics and store
write), which every sweep trial pays once. Two source trees are run alternately in one call,
this checkout and a baseline commit, so the ratio holds on a shared machine:

    python benchmarks/cli_overhead.py --baseline 2ffd53c [--runs 5] [--workload mlp]

The bench runs are short (2 windows of 0.5 s, 3 warm-up steps) on the CPU unless --gpu N.
"Outside the child" = the process's wall time - the record's `duration_s` (the child's wall).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], src: Path) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed with PYTHONPATH={src}:\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git commit to compare against")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--gpu", type=int, default=None)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpuscout-overhead-"))
    baseline_tree = work / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline_tree), args.baseline],
        check=True,
        capture_output=True,
    )
    trees = {"this checkout": ROOT / "src", f"baseline {args.baseline}": baseline_tree / "src"}
    device = ["--gpu", str(args.gpu), "--backend", "jax"] if args.gpu is not None else ["--cpu", "--backend", "jax"]
    bench = [
        sys.executable,
        "-m",
        "gpuscout",
        "bench",
        args.workload,
        *device,
        "--windows",
        "2",
        "--window-seconds",
        "0.5",
        "--warmup-steps",
        "3",
        "--json",
    ]
    help_s: dict[str, list[float]] = {name: [] for name in trees}
    outside_s: dict[str, list[float]] = {name: [] for name in trees}
    child_s: dict[str, list[float]] = {name: [] for name in trees}  # the import overlaps the child: does it slow it?
    try:
        for name, src in trees.items():  # which gpuscout each side really imports
            where = subprocess.run(
                [sys.executable, "-c", "import gpuscout; print(gpuscout.__file__)"],
                env=dict(os.environ, PYTHONPATH=str(src)),
                capture_output=True,
                text=True,
            )
            print(f"{name}: {where.stdout.strip()}", flush=True)
        for i in range(args.runs):
            for name, src in trees.items():
                help_s[name].append(timed([sys.executable, "-m", "gpuscout", "--help"], src)[0])
                wall, out = timed(bench + ["--store", str(work / f"{src.parent.name}.sqlite")], src)
                child_s[name].append(json.loads(out)["runs"][0]["duration_s"])
                outside_s[name].append(wall - child_s[name][-1])
                print(
                    f"run {i + 1}/{args.runs} {name}: help {help_s[name][-1]:.2f} s, "
                    f"bench outside the child {outside_s[name][-1]:.2f} s, child {child_s[name][-1]:.2f} s",
                    flush=True,
                )
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline_tree)], capture_output=True
        )
    base = f"baseline {args.baseline}"
    print(
        "\n| | `gpuscout --help` median | bench outside the child, median (min-max) | the child, median |\n"
        "|---|---|---|---|"
    )
    for name in trees:
        o = outside_s[name]
        print(
            f"| {name} | {statistics.median(help_s[name]):.2f} s | "
            f"{statistics.median(o):.2f} s ({min(o):.2f}-{max(o):.2f}) | {statistics.median(child_s[name]):.2f} s |"
        )
    print(
        f"| ratio this/baseline | {statistics.median(help_s['this checkout']) / statistics.median(help_s[base]):.2f} | "
        f"{statistics.median(outside_s['this checkout']) / statistics.median(outside_s[base]):.2f} | "
        f"{statistics.median(child_s['this checkout']) / statistics.median(child_s[base]):.2f} |"
    )


if __name__ == "__main__":
    main()
