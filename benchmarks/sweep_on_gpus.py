"""A sweep of resnet18_cifar (synthetic data, jax backend) on one GPU and then on all of them,
for docs/benchmarks.md: trials per hour and each GPU's idle share.

    python benchmarks/sweep_on_gpus.py --out OUTDIR [--trials 8] [--gpus 0,1] [--only one_gpu|all_gpus]

(--only: one of the two sweeps, when a call's time limit cannot hold both; the ratio is then
taken from the two calls' JSON files.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

BATCHES = [128, 256, 384, 512, 640, 768, 896, 1024]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--only", choices=("one_gpu", "all_gpus"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # the grid batch x precision: 8 trials (bf16) or 16 (bf16 and fp32); fewer take the first batches
    batches = BATCHES[: min(args.trials, len(BATCHES))]
    precisions = ["mixed_bfloat16", "fp32"][: max(1, -(-args.trials // len(BATCHES)))]
    results = {}
    for label, gpus in (("one_gpu", args.gpus.split(",")[0]), ("all_gpus", args.gpus)):
        if args.only and label != args.only:
            continue
        sweep = args.out / f"{label}.yaml"
        sweep.write_text(
            textwrap.dedent(f"""
            name: r18-{label}
            workload: resnet18_cifar
            metric: {{name: samples_per_s, direction: max}}
            space:
              batch_size: {json.dumps(batches)}
              precision: {json.dumps(precisions)}
            bench: {{backend: jax, windows: 2, window_seconds: 0.5, warmup_steps: 3}}
            timeout_s: 300
        """)
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuscout",
                "sweep",
                str(sweep),
                "--gpus",
                gpus,
                "--json",
                "--store",
                str(args.out / "results.sqlite"),
            ],  # kept when a call's limit cuts it off
            capture_output=True,
            text=True,
        )
        (args.out / f"{label}.stderr.txt").write_text(proc.stderr[-20000:])
        if proc.returncode != 0:
            print(f"{label}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
            continue
        results[label] = json.loads(proc.stdout)
        (args.out / f"{label}.json").write_text(proc.stdout)
    for label, s in results.items():
        print(
            f"{label}: {s['run_now']} trials, wall {s['wall_s']:.1f} s, {s['trials_per_hour']:.1f} trials/h, "
            f"speedup {s['parallel_speedup']:.2f}x, idle {s['gpu_idle_share']}, ok {s['status_counts']['ok']}"
        )
    if len(results) == 2:
        print(f"trials/h ratio: {results['all_gpus']['trials_per_hour'] / results['one_gpu']['trials_per_hour']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
