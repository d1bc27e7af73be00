"""gpuscout's transformer workloads (Keras 3 / JAX, mixed_bfloat16) next to native PyTorch peers
(benchmarks/torch_peers.py, eager and torch.compile) on the same GPU, in one call.

    python benchmarks/transformers_vs_torch.py --out OUTDIR [--only gpt2_small,vit_b16] [--budget-s 540]

Writes OUTDIR/summary.json and OUTDIR/runs.log; prints a table last. Recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (workload, batch, seq): the workloads' defaults
CASES = {"gpt2_small": (16, 1024), "bert_base": (256, 128), "vit_b16": (256, None)}


def run(cmd, log: Path, env=None, timeout=600):
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        code, out, err = 124, "", "timeout"
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"\n===== $ {' '.join(cmd)}\nexit {code}\n--- stdout\n{out[-20000:]}\n--- stderr\n{err[-8000:]}")
    return code, out, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--budget-s", type=float, default=540)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.log"
    env = dict(os.environ, GPUSCOUT_STORE="/tmp/gpuscout-transformers.sqlite")
    began = time.monotonic()
    results: dict = {}
    for name in args.only.split(","):
        batch, seq = CASES[name]
        seq_args = ["--seq-len", str(seq)] if seq else []
        plan = [
            (
                "gpuscout",
                [
                    sys.executable,
                    "-m",
                    "gpuscout",
                    "bench",
                    name,
                    "--backend",
                    "jax",
                    "--precision",
                    "mixed_bfloat16",
                    "--batch-size",
                    str(batch),
                    *seq_args,
                    "--windows",
                    "5",
                    "--window-seconds",
                    "3",
                    "--json",
                ],
            )
        ]
        for mode in ("eager", "compiled"):
            plan.append(
                (
                    f"torch_{mode}",
                    [sys.executable, str(HERE / "torch_peers.py"), name, mode, str(batch)]
                    + ([str(seq)] if seq else []),
                )
            )
        for label, cmd in plan:
            if time.monotonic() - began > args.budget_s:
                print(f"[{name} {label}] skipped: over the time budget", flush=True)
                continue
            code, out, seconds = run(cmd, log, env)
            print(f"[{name} {label}] exit {code} in {seconds:.0f} s", flush=True)
            if label == "gpuscout":
                try:
                    r = json.loads(out)["runs"][0]
                    if r.get("telemetry"):
                        r["telemetry"].pop("samples", None)  # keep the summary small
                    results[f"{name}/gpuscout"] = r
                except (ValueError, KeyError, IndexError):
                    results[f"{name}/gpuscout"] = None
            else:
                line = next((printed for printed in out.splitlines() if printed.startswith("@@peer ")), None)
                results[f"{name}/{label}"] = json.loads(line[7:]) if line else None
    (args.out / "summary.json").write_text(json.dumps(results, indent=2))

    print("\n| workload | run | throughput (median) | CV | compile / first step | MFU | peak mem GiB |")
    print("|---|---|---|---|---|---|---|")
    for key, r in results.items():
        name, label = key.split("/")
        if r is None:
            print(f"| {name} | {label} | failed | | | | |")
        elif label == "gpuscout":
            t = r.get("throughput") or {}
            print(
                f"| {name} | gpuscout ({r['status']}) | {t.get('median', 0):,.0f} {r['unit']} "
                f"| {(t.get('cv') or 0):.2%} | {(r.get('compile_s') or 0):.1f} s | {(r.get('mfu') or 0):.1%} "
                f"| {(r.get('peak_memory_bytes') or 0) / 2**30:.1f} |"
            )
        else:
            w = r["windows"]
            cv = (sum((x - sum(w) / len(w)) ** 2 for x in w) / (len(w) - 1)) ** 0.5 / (sum(w) / len(w))
            print(
                f"| {name} | {label} | {r['median']:,.0f} | {cv:.2%} | {r['first_step_s']:.1f} s | | "
                f"{r['peak_memory_bytes'] / 2**30:.1f} |"
            )
    for name in CASES:
        ours = results.get(f"{name}/gpuscout")
        peers = [results.get(f"{name}/torch_{m}") for m in ("eager", "compiled")]
        best = max((p["median"] for p in peers if p), default=None)
        if ours and ours.get("throughput") and best:
            print(f"{name}: gpuscout / best torch = {ours['throughput']['median'] / best:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
