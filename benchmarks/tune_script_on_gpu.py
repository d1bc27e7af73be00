"""`gpuscout tune -- COMMAND` on a lent GPU (issue 31), in one call:

1. tune of a user-style ResNet-50 `fit` in float32 with jit_compile=False (data on the GPU);
2. tune of the same model fed by a one-worker PyDataset doing per-image work;
3. the peer: `gpuscout bench resnet50` at the same batch, in the precision the combined run used.

Writes each tune's JSON report and the bench record to OUT, and prints a short table last: each
change's measured gain, the combined run's samples/s against bench's, and each session's wall time.

    PYTHONPATH=src python benchmarks/tune_script_on_gpu.py --out OUT [--small] [--only fp32-nojit]
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


def gpuscout(*args: str, out: Path, name: str, timeout: float) -> tuple[dict | None, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    wall = time.monotonic() - started
    (out / f"{name}.stderr.txt").write_text(done.stderr[-200_000:])
    (out / f"{name}.json").write_text(done.stdout)
    try:
        return json.loads(done.stdout), wall
    except ValueError:
        print(f"{name}: exit {done.returncode}; {done.stderr[-2000:]}", flush=True)
        return None, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--small", action="store_true", help="a small CNN instead of ResNet-50 (a CPU smoke test)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--only", default="fp32-nojit,pydataset,bench")
    parser.add_argument("--budget", default="8", help="minutes per tune session")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = str(args.out / "results.sqlite")
    wanted = args.only.split(",")
    reports = {}
    for mode in ("fp32-nojit", "pydataset"):
        if mode not in wanted:
            continue
        command = [sys.executable, str(HERE / "tune_user_resnet50.py"), mode, "--batch", str(args.batch)]
        command += ["--small"] if args.small else []
        report, wall = gpuscout(
            "tune",
            "--json",
            "--budget-minutes",
            args.budget,
            "--store",
            store,
            "--",
            *command,
            out=args.out,
            name=f"tune-{mode}",
            timeout=560,
        )
        reports[mode] = (report, wall)
        print(f"tune {mode}: {wall:.0f} s", flush=True)
    benches = {}
    if "bench" in wanted:
        for precision in ("fp32", "mixed_bfloat16"):  # the peers of a jit_compile run and of a combined one
            record, wall = gpuscout(
                "bench",
                "resnet50",
                "--backend",
                "jax",
                "--batch-size",
                str(args.batch),
                "--precision",
                precision,
                "--json",
                "--store",
                store,
                out=args.out,
                name=f"bench-{precision}",
                timeout=300,
            )
            benches[precision] = record["runs"][0]["samples_per_s"] if record else None
            print(
                f"bench resnet50 {precision} batch {args.batch}: {benches[precision]} samples/s ({wall:.0f} s)",
                flush=True,
            )
    bench = benches.get("mixed_bfloat16")
    print("\n| session | change | samples/s | speed-up [95% CI] | verdict |")
    print("|---|---|---|---|---|")
    for mode, (report, wall) in reports.items():
        if report is None:
            print(f"| {mode} | (failed) | | | |")
            continue
        base = report["baseline"]["samples_per_s"]
        print(f"| {mode} ({wall:.0f} s, {report['steps']} steps/run) | baseline | {base:,.0f} | | |")
        for row in report["rows"]:
            gain = (
                f"{row['ratio']:.2f}x [{row['ratio_low']:.2f}-{row['ratio_high']:.2f}]"
                if row.get("ratio_low") is not None
                else row.get("verdict", "")
            )
            rate = f"{row['samples_per_s']:,.0f}" if row.get("samples_per_s") else "-"
            print(f"| {mode} | {row['change']} | {rate} | {gain} | {row.get('verdict')} {row.get('health') or ''} |")
        combined = next((r for r in report["rows"] if r["change"] == "combined"), None)
        if combined and bench and combined.get("samples_per_s"):
            print(
                f"| {mode} | combined vs bench | {combined['samples_per_s']:,.0f} vs {bench:,.0f} | "
                f"{combined['samples_per_s'] / bench:.3f}x of bench | |"
            )
        for skipped in report["skipped"]:
            print(f"| {mode} | not tried: {skipped['change']} | | | {skipped['reason']} |")


if __name__ == "__main__":
    main()
