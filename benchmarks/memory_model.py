"""Measure the peak device memory of each workload at two batch sizes and fit the linear model
that `gpuscout bench --batch-size auto` and the pre-run fit check use (gpuscout/workloads/sizing.py):

    peak ~= fixed + per_sample x batch      (per precision; token workloads at their default length)

    python benchmarks/memory_model.py --out OUTDIR [--parallel 3] [--only vit_b16,bert_base] [--oom-probe '']

Each point is a real `gpuscout bench` run (jax backend, short protocol: the allocator's peak is
reached in the first steps), several at a time on the one GPU: each process has its own allocator
(preallocation off), so the peaks do not mix. The out-of-memory probe runs alone, last.
Writes OUTDIR/points.json and OUTDIR/runs.log; prints the fitted table last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

GIB = 2**30
# (workload, precision, seq_len or None, (batch_a, batch_b))
POINTS = [
    ("mlp", "mixed_bfloat16", None, (256, 1024)),
    ("resnet18_cifar", "mixed_bfloat16", None, (128, 512)),
    ("resnet50", "mixed_bfloat16", None, (64, 256)),
    ("vit_b16", "mixed_bfloat16", None, (64, 256)),
    ("bert_base", "mixed_bfloat16", None, (64, 256)),
    ("gpt2_small", "mixed_bfloat16", None, (4, 16)),
    ("resnet50", "fp32", None, (64, 128)),
    ("vit_b16", "fp32", None, (32, 64)),
    ("bert_base", "fp32", None, (32, 64)),
    ("gpt2_small", "fp32", None, (4, 8)),
    ("bert_base", "mixed_bfloat16", 512, (16, 64)),
    ("gpt2_small", "mixed_bfloat16", 256, (16, 64)),
]
SHORT = [
    "--warmup-steps",
    "2",
    "--windows",
    "1",
    "--window-steps",
    "2",
    "--window-seconds",
    "0.2",
    "--no-telemetry",
    "--json",
    "--backend",
    "jax",
]


def bench(args: list[str], log: Path, timeout: float = 420) -> dict:
    cmd = [sys.executable, "-m", "gpuscout", "bench", *args, *SHORT]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired:
        out, err, code = "", "timeout", 124
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"\n===== $ {' '.join(cmd)}\nexit {code}\n--- stderr\n{err[-3000:]}")
    try:
        record = json.loads(out)["runs"][0]
    except (ValueError, KeyError, IndexError):
        return {"args": args, "status": "no-record", "seconds": time.monotonic() - start}
    return {
        "args": args,
        "status": record["status"],
        "seconds": time.monotonic() - start,
        "peak_bytes": record["peak_memory_bytes"],
        "samples_per_s": record["samples_per_s"],
        "error": (record.get("error") or {}).get("message"),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--oom-probe", default="gpt2_small:256", help="WORKLOAD:BATCH, or '' for none")
    parser.add_argument("--only", default="", help="comma-separated workloads to measure (all when empty)")
    args = parser.parse_args()
    points_wanted = [p for p in POINTS if not args.only or p[0] in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.log"
    jobs = []
    for workload, precision, seq, batches in points_wanted:
        for batch in batches:
            extra = ["--seq-len", str(seq)] if seq else []
            jobs.append(
                (
                    (workload, precision, seq, batch),
                    [workload, "--precision", precision, "--batch-size", str(batch), *extra],
                )
            )
    began = time.monotonic()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: (job[0], bench(job[1], log)), jobs))
    points = [{"workload": w, "precision": p, "seq_len": s, "batch": b, **r} for (w, p, s, b), r in results]
    if args.oom_probe:
        workload, batch = args.oom_probe.split(":")
        probe = bench([workload, "--precision", "mixed_bfloat16", "--batch-size", batch], log)
        points.append(
            {
                "workload": workload,
                "precision": "mixed_bfloat16",
                "seq_len": None,
                "batch": int(batch),
                "oom_probe": True,
                **probe,
            }
        )
    (args.out / "points.json").write_text(json.dumps(points, indent=1))
    print(f"{len(points)} runs in {time.monotonic() - began:.0f} s")
    print(f"{'workload':16} {'precision':15} {'seq':>5} {'fixed GiB':>10} {'MiB/sample':>11}  points")
    for workload, precision, seq, (a, b) in points_wanted:
        pa, pb = (
            [
                p
                for p in points
                if (p["workload"], p["precision"], p["seq_len"], p["batch"]) == (workload, precision, seq, batch)
                and not p.get("oom_probe")
            ][0]
            for batch in (a, b)
        )
        if pa.get("peak_bytes") and pb.get("peak_bytes"):
            per = (pb["peak_bytes"] - pa["peak_bytes"]) / (b - a)
            fixed = pa["peak_bytes"] - per * a
            print(
                f"{workload:16} {precision:15} {seq or '-':>5} {fixed / GIB:10.2f} {per / 2**20:11.1f}  "
                f"{a}:{pa['peak_bytes'] / GIB:.2f} {b}:{pb['peak_bytes'] / GIB:.2f} GiB"
            )
        else:
            print(f"{workload:16} {precision:15} {seq or '-':>5} failed: {pa['status']} {pb['status']}")
    for p in points:
        if p.get("oom_probe"):
            print(
                f"oom probe {p['args'][0]} batch {p['batch']}: {p['status']} after {p['seconds']:.0f} s "
                f"({(p.get('error') or '')[:120]})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
