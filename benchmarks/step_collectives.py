"""What the data-parallel step sends between devices, as XLA compiled it, and (on GPUs) a
profiler trace of a few steps: where a multi-GPU step's time outside compute goes (issue 34).

    python benchmarks/step_collectives.py --out DIR [--workload resnet50] [--devices 2]
        [--batch-per-device 256] [--precision mixed_bfloat16] [--steps 20] [--trace-steps 5]

Builds the step `gpuscout scale` runs (gpuscout.child.jax_steps, per-replica batch norm, one
mesh over `--devices` devices; logical CPU devices where there is no GPU), then from the
compiled program's text (`compiled.as_text()`, after XLA's optimisations: the all-reduce
combiner has run) lists every collective with its payload, in program order, and the position
of each in the schedule (how many instructions of the entry computation come before it, and,
for an asynchronous one, where its -done is and how many kernels run beside it: what
gpuscout.child.collectives reads, and every run over several devices keeps in its record).
Then runs `--steps` steps and, on GPUs, traces `--trace-steps` more with jax.profiler
(DIR/trace/..., perfetto JSON: read it here, the device kernels are named there).
Writes DIR/collectives.json and prints a short summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--batch-per-device", type=int, default=256)
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--trace-steps", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    from built_step import build, require_devices, step_spec

    on_gpu = require_devices(args.devices)

    from gpuscout.child.collectives import collectives

    built = build(step_spec(args.workload, args.precision, args.batch_per_device, args.seq_len, args.devices))
    runner = built.runner
    hlo = built.compiled().as_text()
    (args.out / "step_after_optimizations.txt").write_text(hlo)
    found, instructions = collectives(hlo)

    logs = None
    for i in range(args.steps):
        logs = runner.step(i)
    runner.sync(logs)
    began = time.monotonic()
    for i in range(args.steps):
        logs = runner.step(i)
    runner.sync(logs)
    step_s = (time.monotonic() - began) / args.steps
    if on_gpu and args.trace_steps:
        with jax.profiler.trace(str(args.out / "trace"), create_perfetto_trace=True):
            for i in range(args.trace_steps):
                logs = runner.step(i)
            runner.sync(logs)

    summary = {
        "workload": args.workload,
        "devices": args.devices,
        "precision": args.precision,
        "batch_per_device": args.batch_per_device,
        "platform": jax.default_backend(),
        "jax": jax.__version__,
        "step_s": step_s,
        "entry_instructions": instructions,
        "collectives": found,
        "collective_bytes": sum(c["bytes"] for c in found),
    }
    (args.out / "collectives.json").write_text(json.dumps(summary, indent=1))
    print(
        f"{args.workload} on {args.devices} {jax.default_backend()} devices, {args.precision}, "
        f"batch {args.batch_per_device}/device: {step_s * 1000:.2f} ms a step"
    )
    print(
        f"{len(found)} collectives, {summary['collective_bytes'] / 2**20:.1f} MiB, in an entry computation "
        f"of {instructions} instructions:"
    )
    for c in found[:40]:
        done = f" .. {c['done_position']}" if c["done_position"] else ""
        beside = f", beside {c['compute_between']} kernels" if c["done_position"] else ""
        print(
            f"  at {c['position']:5d}{done:8s} {c['op']:24s} {c['bytes'] / 2**20:9.2f} MiB  "
            f"{c['operands']} operand(s){beside}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
