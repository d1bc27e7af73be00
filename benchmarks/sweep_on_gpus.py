"""A sweep of resnet18_cifar (synthetic data, jax backend) on one GPU and then on all of them,
for docs/benchmarks.md: trials per hour and each GPU's idle share.

    python benchmarks/sweep_on_gpus.py --out OUTDIR [--trials 8]
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
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    batches = (BATCHES * 4)[:args.trials]
    results = {}
    for label, gpus in (("one_gpu", args.gpus.split(",")[0]), ("all_gpus", args.gpus)):
        sweep = args.out / f"{label}.yaml"
        sweep.write_text(textwrap.dedent(f"""
            name: r18-{label}
            workload: resnet18_cifar
            metric: {{name: samples_per_s, direction: max}}
            space:
              batch_size: {json.dumps(sorted(set(batches)))}
              precision: [mixed_bfloat16]
            bench_args: [--backend, jax, --windows, "2", --window-seconds, "0.5", --warmup-steps, "3"]
            timeout_s: 300
        """))
        proc = subprocess.run([sys.executable, "-m", "gpuscout", "sweep", str(sweep), "--gpus", gpus, "--json"],
                              capture_output=True, text=True)
        (args.out / f"{label}.stderr.txt").write_text(proc.stderr[-20000:])
        if proc.returncode != 0:
            print(f"{label}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
            continue
        results[label] = json.loads(proc.stdout)
        (args.out / f"{label}.json").write_text(proc.stdout)
    for label, s in results.items():
        print(f"{label}: {s['run_now']} trials, wall {s['wall_s']:.1f} s, {s['trials_per_hour']:.1f} trials/h, "
              f"speedup {s['parallel_speedup']:.2f}x, idle {s['gpu_idle_share']}, ok {s['status_counts']['ok']}")
    if len(results) == 2:
        print(f"trials/h ratio: {results['all_gpus']['trials_per_hour'] / results['one_gpu']['trials_per_hour']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
