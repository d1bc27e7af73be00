"""`gpuscout tune` on a GPU (jax backend), for docs/benchmarks.md: the ablation tables, the largest
batch and knee, and the input-bound verdict for a host pipeline made slow on purpose and one that
is not (the same workload, resnet18_cifar, at 1 and at 32 augmentation passes per sample).

    python benchmarks/tune_on_gpu.py --out OUTDIR --step resnet50      # ablation + batch search
    python benchmarks/tune_on_gpu.py --out OUTDIR --step gpt2_input    # gpt2_small ablation + input verdicts
    python benchmarks/tune_on_gpu.py --out OUTDIR --step ablations_input   # both ablations + input, one call

Writes each report as OUTDIR/<name>.json (the same JSON `gpuscout tune --json` prints) and prints
a short summary last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

STEPS = {
    "resnet50": [
        (
            "resnet50_ablation_batch",
            ["resnet50", "--parts", "ablation,batch", "--budget-minutes", "9.2", "--max-batch", "8192"],
        )
    ],
    "gpt2_input": [
        ("gpt2_small_ablation", ["gpt2_small", "--parts", "ablation", "--budget-minutes", "3.5"]),
        ("input_fast", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "1", "--budget-minutes", "1.5"]),
        ("input_slow", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "32", "--budget-minutes", "1.5"]),
    ],
    "gpt2_and_input": [
        ("input_fast", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "1", "--budget-minutes", "2"]),
        ("input_slow", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "32", "--budget-minutes", "2"]),
        ("gpt2_small_ablation", ["gpt2_small", "--parts", "ablation", "--budget-minutes", "3.3", "--windows", "2"]),
    ],
    "ablations_input": [
        ("resnet50_ablation", ["resnet50", "--parts", "ablation", "--budget-minutes", "3.8"]),
        ("gpt2_small_ablation", ["gpt2_small", "--parts", "ablation", "--budget-minutes", "2.2"]),
        ("input_fast", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "1", "--budget-minutes", "1.0"]),
        ("input_slow", ["resnet18_cifar", "--parts", "input", "--pipeline-cost", "32", "--budget-minutes", "1.0"]),
    ],
}


def summarize(name: str, report: dict) -> None:
    print(f"== {name}: {report['workload']} on {report['gpu']}, {report['elapsed_s']:.0f} s")
    for row in (report.get("ablation") or {}).get("rows", []):
        s = row["speedup"]
        loss = row["loss"] or {}
        print(
            f"  {row['label'][:60]:60} {row['samples_per_s'] or 0:12,.1f}/s  "
            + (f"{s['ratio']:.2f}x [{s['ci95_low']:.2f}-{s['ci95_high']:.2f}]" if s else "-")
            + (f"  loss {loss.get('value'):.4g} vs {loss.get('baseline'):.4g}" if loss else "")
        )
    batch = report.get("batch")
    if batch:
        print(
            f"  largest batch {batch['largest']} (first OOM {batch.get('first_oom')}, {len(batch['probes'])} probes), "
            f"knee {batch['knee']}: "
            + ", ".join(
                f"{c['batch_size']}: {c['samples_per_s'] or 0:,.0f}/s {(c['peak_memory_bytes'] or 0) / 2**30:.1f} GiB"
                for c in batch["curve"]
            )
        )
    inp = report.get("input")
    if inp:
        one, tuned = inp.get("pipeline_one_thread") or {}, inp.get("pipeline_tuned") or {}
        print(
            f"  input: alone {one.get('samples_per_s') or 0:,.0f}/s (1 thread), "
            f"{tuned.get('samples_per_s') or 0:,.0f}/s (tuned); model {inp['model_samples_per_s'] or 0:,.0f}/s; "
            f"together {inp['together_samples_per_s'] or 0:,.0f}/s, "
            f"wait {100 * (inp['input_wait_share'] or 0):.1f}% -> {inp['verdict']}; cores needed {inp['cores_needed']}"
        )
    if report["skipped"]:
        print(f"  skipped (budget): {report['skipped']}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--step", choices=sorted(STEPS), required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    reports = []
    for name, tune_args in STEPS[args.step]:
        began = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "gpuscout", "tune", *tune_args, "--backend", "jax", "--json"],
            capture_output=True,
            text=True,
        )
        (args.out / f"{name}.stderr.txt").write_text(proc.stderr[-20000:])
        if proc.returncode != 0:
            print(f"== {name}: exit {proc.returncode} after {time.monotonic() - began:.0f} s\n{proc.stderr[-1500:]}")
            continue
        (args.out / f"{name}.json").write_text(proc.stdout)
        reports.append((name, json.loads(proc.stdout)))
    for name, report in reports:
        summarize(name, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
