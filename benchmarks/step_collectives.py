"""What the data-parallel step sends between devices, as XLA compiled it, and (on GPUs) a
profiler trace of a few steps: where a multi-GPU step's time outside compute goes (issue 34).

    python benchmarks/step_collectives.py --out DIR [--workload resnet50] [--devices 2]
        [--batch-per-device 256] [--precision mixed_bfloat16] [--steps 20] [--trace-steps 5]

Builds the step `gpuscout scale` runs (gpuscout.child.jax_steps, per-replica batch norm, one
mesh over `--devices` devices; logical CPU devices where there is no GPU), then from the
compiled program's text (`compiled.as_text()`, after XLA's optimisations: the all-reduce
combiner has run) lists every collective with its operands' bytes, in program order, and the
position of each in the schedule (how many instructions of the entry computation come before
it, and, for an asynchronous one, where its -done is: an all-reduce that starts after the
backward pass, or ends right after it started, overlaps nothing).
Then runs `--steps` steps and, on GPUs, traces `--trace-steps` more with jax.profiler
(DIR/trace/..., perfetto JSON: read it here, the device kernels are named there).
Writes DIR/collectives.json and prints a short summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s64": 8, "f64": 8, "pred": 1, "s8": 1, "u8": 1}
COLLECTIVE = re.compile(r"\b(all-reduce-start|all-reduce|all-gather-start|all-gather|reduce-scatter|"
                        r"collective-permute-start|collective-permute|all-to-all)\(")


def shape_bytes(shapes: str) -> int:
    """Bytes of every array shape in an HLO result type like '(f32[64,3]{1,0}, bf16[7])'."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shapes):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * DTYPE_BYTES.get(dtype, 4)
    return total


# XLA's own all-reduce kernels (Triton, one- and two-shot over NVLink; jax 0.11 uses them for
# buffers of up to a few MB): a fusion whose backend config names this kind.
TRITON_COLLECTIVE = '"kind":"__triton_collective"'
COMPUTE = re.compile(r" (fusion|custom-call|convolution|dot)\(")


def collectives(hlo: str) -> tuple[list[dict], int]:
    """The collectives of the entry computation in schedule order, and its instruction count. An
    asynchronous one (`-start` ... `-done`) also says how many kernels (fusions, library calls) XLA
    scheduled between its start and its end: the computation it can overlap (0: none)."""
    entry = hlo[hlo.find("\nENTRY "):] if "\nENTRY " in hlo else hlo
    body = entry[:entry.find("\n}\n")] if "\n}\n" in entry else entry
    found, position, started = [], 0, {}
    for line in body.splitlines()[1:]:
        if " = " not in line:
            continue
        position += 1
        name, rhs = (part.strip() for part in line.split(" = ", 1))
        name = name.replace("ROOT ", "").lstrip("%")
        if "-done(" in rhs:  # an asynchronous collective ends here: how far it ran beside other work
            operand = re.search(r"-done\([^%]*%([\w.\-]+)", rhs)
            if operand and operand.group(1) in started:
                started.pop(operand.group(1))["done_position"] = position
            continue
        for pending in started.values():
            pending["compute_between"] += bool(COMPUTE.search(rhs))
        m = COLLECTIVE.search(rhs)
        triton = TRITON_COLLECTIVE in rhs and re.search(r" (fusion-start|fusion)\(", rhs)
        if not (m or triton):
            continue
        op = m.group(1) if m else "triton all-reduce" + ("-start" if triton.group(1) == "fusion-start" else "")
        result = rhs[:rhs.find(m.group(1) if m else triton.group(1) + "(")]
        size, operands = shape_bytes(result), len(re.findall(r"\b[a-z]+\d*\[", result))
        if op.endswith("all-reduce-start"):  # ((operands), results): the results alias the operands
            size, operands = size // 2, operands // 2
        entry = {"name": name, "op": op, "position": position, "bytes": size, "operands": operands,
                 "done_position": None, "compute_between": 0}
        found.append(entry)
        if op.endswith("-start"):
            started[name] = entry
    return found, position


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

    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and len(jax.devices()) < args.devices:
        sys.exit(f"jax sees {len(jax.devices())} device(s); on a CPU set "
                 f"XLA_FLAGS=--xla_force_host_platform_device_count={args.devices}")
    from built_step import build, step_spec

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

    summary = {"workload": args.workload, "devices": args.devices, "precision": args.precision,
               "batch_per_device": args.batch_per_device, "platform": jax.default_backend(), "jax": jax.__version__,
               "step_s": step_s, "entry_instructions": instructions, "collectives": found,
               "collective_bytes": sum(c["bytes"] for c in found)}
    (args.out / "collectives.json").write_text(json.dumps(summary, indent=1))
    print(f"{args.workload} on {args.devices} {jax.default_backend()} devices, {args.precision}, "
          f"batch {args.batch_per_device}/device: {step_s * 1000:.2f} ms a step")
    print(f"{len(found)} collectives, {summary['collective_bytes'] / 2**20:.1f} MiB, in an entry computation "
          f"of {instructions} instructions:")
    for c in found[:40]:
        done = f" .. {c['done_position']}" if c["done_position"] else ""
        beside = f", beside {c['compute_between']} kernels" if c["done_position"] else ""
        print(f"  at {c['position']:5d}{done:8s} {c['op']:24s} {c['bytes'] / 2**20:9.2f} MiB  "
              f"{c['operands']} operand(s){beside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
