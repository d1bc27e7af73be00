"""Where a workload's training step keeps its memory: XLA's own accounting of the compiled step.

    python benchmarks/step_memory.py --out DIR [--workload vit_b16] [--batch N]
        [--precision mixed_bfloat16] [--seq-len N] [--steps 20] [--top 40]

Builds the step exactly as `gpuscout bench` does (gpuscout.child.jax_steps.build_runner, one
device), with XLA dumping that program's buffer assignment (`--xla_dump_to`, only the module
`jit_train_step`), then:
- `compiled.memory_analysis()`: the step's arguments, outputs, aliased (donated) bytes and the
  temporaries XLA plans for (its heap simulation: the most live at once);
- the allocator's peak after `--steps` steps (what `bench` reports as peak memory);
- the buffers live at the step's peak, from XLA's live-range dump, with the operation that
  made each (its jax source path), and XLA's breakdown of the peak by that path.
Writes DIR/summary.json, DIR/dump.tgz (the dump), and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tarfile
from collections import Counter
from pathlib import Path

from built_step import add_step_arguments, parse_step_arguments

GIB = 1 << 30


def main() -> int:
    parser = argparse.ArgumentParser()
    add_step_arguments(parser)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=40)
    args = parse_step_arguments(parser)
    dump = Path("/tmp/step_memory_dump") / args.workload
    os.environ["XLA_FLAGS"] = " ".join(
        filter(None, (os.environ.get("XLA_FLAGS"), f"--xla_dump_to={dump}", "--xla_dump_hlo_module_re=.*train_step.*"))
    )
    os.environ.setdefault("KERAS_BACKEND", "jax")
    args.out.mkdir(parents=True, exist_ok=True)

    import jax
    import keras
    from built_step import build, step_spec

    built = build(step_spec(args.workload, args.precision, args.batch, args.seq_len))
    device = jax.local_devices()[0]
    before = device.memory_stats() or {}
    analysis = built.compiled().memory_analysis()
    planned = (
        {
            name: int(getattr(analysis, name))
            for name in (
                "argument_size_in_bytes",
                "output_size_in_bytes",
                "alias_size_in_bytes",
                "temp_size_in_bytes",
                "generated_code_size_in_bytes",
            )
        }
        if analysis is not None
        else {}
    )
    logs = None
    for i in range(args.steps):
        logs = built.runner.step(i)
    built.runner.sync(logs)
    after = device.memory_stats() or {}

    buffers, breakdown = peak_live(dump)
    groups = Counter()
    for b in buffers:
        groups[b["group"]] += b["bytes"]
    summary = {
        "workload": args.workload,
        "batch": args.batch,
        "precision": args.precision,
        "jax": jax.__version__,
        "keras": keras.__version__,
        "device": device.device_kind,
        "planned": planned,
        "before_steps": {k: before.get(k) for k in ("bytes_in_use", "peak_bytes_in_use")},
        "after_steps": {k: after.get(k) for k in ("bytes_in_use", "peak_bytes_in_use")},
        "peak_buffers": buffers[:300],
        "groups_bytes": dict(groups.most_common()),
        "peak_by_op_name": breakdown,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    with tarfile.open(args.out / "dump.tgz", "w:gz") as tar:
        for path in dump.iterdir():
            if path.name.endswith(".txt") and "after_optimizations" in path.name:
                tar.add(path, arcname=path.name)

    print(f"{args.workload} b{args.batch} {args.precision} on {device.device_kind}, jax {jax.__version__}")
    for name, value in planned.items():
        print(f"  {name:32s} {value / GIB:8.2f} GiB")
    print(
        f"  allocator peak after {args.steps} steps  {after.get('peak_bytes_in_use', 0) / GIB:8.2f} GiB "
        f"(before the first step {before.get('peak_bytes_in_use', 0) / GIB:.2f})"
    )
    print("  live at the step's peak, by the jax op that made them (XLA's breakdown):")
    for entry in breakdown[:25]:
        print(f"    {entry['bytes'] / GIB:7.3f} GiB  {entry['op'][:100]}")
    print(f"  largest {args.top}:")
    for b in buffers[: args.top]:
        print(f"    {b['bytes'] / GIB:7.3f} GiB  {b['shape'][:40]:40s} {b['op'][:90]}")
    return 0


def peak_live(dump: Path) -> tuple[list[dict], list[dict]]:
    """The buffers live at the step's peak and the peak broken down by jax op name, from XLA's
    live-range dump (`*after_optimizations-live-range.txt`: "Live ranges at N (peak)" and "Stack
    trace breakdown for peak usage"), each buffer named by the op that made it (the HLO's
    metadata op_name) with its shape."""
    ranges = sorted(dump.glob("*train_step*after_optimizations-live-range.txt"), key=lambda p: -p.stat().st_size)
    if not ranges:
        return [], []
    text = ranges[0].read_text()
    hlo_path = Path(str(ranges[0]).replace("-live-range.txt", ".txt"))
    hlo = hlo_path.read_text() if hlo_path.exists() else ""
    made_by = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ", line)
        if m:
            op = re.search(r'op_name="([^"]*)"', line)
            made_by[m.group(1)] = (m.group(2), op.group(1) if op else "")
    buffers = []
    peak = text.find("(peak):")
    for m in re.finditer(r"^\s+([\w.\-]+)\{[^}]*\}: (\d+) bytes", text[peak:], re.M) if peak >= 0 else []:
        shape, op = made_by.get(m.group(1), ("", ""))
        buffers.append(
            {
                "name": m.group(1),
                "bytes": int(m.group(2)),
                "shape": shape,
                "op": op or m.group(1),
                "group": _group(op or m.group(1)),
            }
        )
    breakdown = [
        {"op": m.group(1), "bytes": int(m.group(2).replace(" ", ""))}
        for m in re.finditer(r"[├└]── (.+?) \([\d.]+%, total: ([\d ]+) bytes", text)
    ]
    return sorted(buffers, key=lambda b: -b["bytes"]), breakdown


def _group(op_name: str) -> str:
    """The op's jax path without indices: 'jit(train_step)/jvp(...)/dense_3/...' -> layer kind + op."""
    parts = [re.sub(r"_\d+$", "", p) for p in op_name.split("/") if p]
    parts = [p for p in parts if not p.startswith(("jit(", "jvp(", "transpose(", "pjit"))]
    return "/".join(parts[-3:]) if parts else op_name


if __name__ == "__main__":
    sys.exit(main())
