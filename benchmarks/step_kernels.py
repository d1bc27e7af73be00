"""Where a training step spends its time on the GPU, kernel by kernel: gpuscout's step beside a
PyTorch peer's, and gpuscout's one-GPU step beside its data-parallel one, from profiler traces
of the same number of steps (issue 34: ViT-B/16 against timm compiled; the 2-4 ms a step that
two GPUs add).

    python benchmarks/step_kernels.py --out DIR [--workload vit_b16] [--batch N]
        [--precision mixed_bfloat16] [--seq-len N] [--peer compiled[,compiled-model,eager]|none]
        [--trace-steps 5] [--variant NAME=XLA_FLAGS ...] [--devices N] [--budget-s 540]

Each side runs in its own process (jax takes most of the GPU's memory when it starts):
- jax: the step `gpuscout bench` builds (built_step.py), timed over 5 windows of >= 2 s, then
  `--trace-steps` steps under jax.profiler (perfetto JSON) and the optimised HLO (fusion names
  in the trace are its instructions);
- with `--devices N`, also the step `gpuscout scale` runs on N GPUs (--batch per GPU,
  per-replica batch norm), each GPU's kernels summarised on their own: is a GPU computing
  slower (clocks), communicating (NCCL's kernels), or idle;
- torch: torch_peers.py's step for the same model, timed the same way, then torch.profiler;
- each `--variant` reruns the jax side untraced with XLA_FLAGS set (what a flag buys, measured).
From each trace, the GPU's kernels: time per step by kind (communication, matmul, attention,
convolution, reduction, elementwise, optimizer, copies), the busy time (union of kernel
intervals) against the step's wall time, and the longest kernels. Writes DIR/summary.json and
the traces; prints a side-by-side table last. Parts that no longer fit in --budget-s are
skipped and said so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from built_step import add_step_arguments, parse_step_arguments

from gpuscout.child.collectives import TRITON_COLLECTIVE
from gpuscout.measure.trace_kernels import (  # noqa: F401 (step_buckets imports
    COLLECTIVE,
    device_kernels,
    load_trace,
    per_device,  # the 2nd and 3rd here)
)

# Kernel kinds, first match wins: attention before convolution (cuDNN names attention kernels
# "..._sdpa_..._fprop_..."; its helpers are cudnn::fusion::...), convolution before matmul (cuDNN's
# implicit-GEMM convolutions), reductions before copies (inductor's layer norm kernels are named
# "..._to_copy_..._native_layer_norm_..."); "convert" is not a convolution; NCCL's kernels first.
KINDS = (
    ("communication", COLLECTIVE),  # the pattern watch reads a user's trace with
    ("attention", re.compile(r"sdpa|fmha|flash|attention|attn|cudnn::fusion", re.I)),
    ("convolution", re.compile(r"fprop|dgrad|wgrad|convolution|implicit_gemm|conv2d|\bconv\b", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cublas|xmma|cutlass|matmul|\bdot", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam", re.I)),
    ("reduction", re.compile(r"reduce|triton_red|triton_per|welford|norm", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy|transpose|concatenate|pad|slice", re.I)),
)


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "elementwise")


def summarise(kernels: list[dict], steps: int, top: int = 30) -> dict:
    """Per step: time by kind, busy time (the union of kernel intervals), and the longest kernels."""
    by_kind, by_name, counts, ops = defaultdict(float), defaultdict(float), defaultdict(int), {}
    for k in kernels:
        by_kind[kind_of(k["name"])] += k["dur_us"]
        by_name[k["name"]] += k["dur_us"]
        counts[k["name"]] += 1
        ops.setdefault(k["name"], k["op"])
    busy, end = 0.0, float("-inf")
    for k in sorted(kernels, key=lambda k: k["ts_us"]):
        start, stop = k["ts_us"], k["ts_us"] + k["dur_us"]
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    span = (end - min(k["ts_us"] for k in kernels)) if kernels else 0.0
    per_step = lambda us: us / steps / 1000  # noqa: E731  (microseconds in the trace -> ms a step)
    longest = sorted(by_name, key=by_name.get, reverse=True)[:top]
    return {
        "steps": steps,
        "kernels_per_step": len(kernels) / steps,
        "busy_ms": per_step(busy),
        "span_ms": per_step(span),
        "kernel_sum_ms": per_step(sum(by_name.values())),
        "by_kind_ms": {kind: per_step(us) for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "longest": [
            {"name": n[:160], "kind": kind_of(n), "ms": per_step(by_name[n]), "calls": counts[n] / steps, "op": ops[n]}
            for n in longest
        ],
    }


def by_device(kernels: list[dict], steps: int) -> dict:
    """summarise() for each device's kernels (a multi-GPU step: is a GPU busier, or waiting?)."""
    devices = sorted({k["device"] for k in kernels})
    return {d: summarise([k for k in kernels if k["device"] == d], steps, top=10) for d in devices}


def triton_collective_names(hlo: str) -> set[str]:
    """XLA's own all-reduce kernels (Triton fusions of kind __triton_collective) carry a fusion's
    name, not NCCL's: the names their kernels may have in a trace (the instruction's and the fused
    computation's, with '.' and '-' as '_'), so that they count as communication."""
    names = set()
    for line in hlo.splitlines():
        if TRITON_COLLECTIVE in line:
            names.update(re.findall(r"%([\w.\-]+) = ", line)[:1] + re.findall(r"calls=%([\w.\-]+)", line))
    return {n.replace(".", "_").replace("-", "_") for n in names}


def timed(step, sync, units: int, window_s: float = 2.0, windows: int = 5) -> dict:
    """Median units/s over windows of >= window_s (steps per window from a 10-step pass)."""
    handle = None
    for i in range(10):
        handle = step(i)
    sync(handle)
    began = time.monotonic()
    for i in range(10):
        handle = step(i)
    sync(handle)
    n = max(10, int(window_s / ((time.monotonic() - began) / 10)) + 1)
    rates = []
    for _ in range(windows):
        began = time.monotonic()
        for i in range(n):
            handle = step(i)
        sync(handle)
        rates.append(n * units / (time.monotonic() - began))
    return {"windows": rates, "median": statistics.median(rates), "step_ms": 1000 * units / statistics.median(rates)}


def jax_side(args) -> dict:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    from built_step import build, step_spec

    from gpuscout.workloads import get

    spec = step_spec(args.workload, args.precision, args.batch, args.seq_len, args.devices)
    built = build(spec)
    units = spec.batch_size * get(args.workload).units_per_sample(spec.seq_len)
    result = {
        "side": "jax",
        "jax": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "device": jax.devices()[0].device_kind,
        "devices": args.devices,
        "throughput": timed(built.runner.step, built.runner.sync, units),
    }
    if args.trace_steps:
        hlo = built.compiled().as_text()  # from the persistent cache the parent set up
        with gzip.open(args.out / "step_after_optimizations.txt.gz", "wt") as f:
            f.write(hlo)
        with jax.profiler.trace(str(args.out / "trace"), create_perfetto_trace=True):
            handle = None
            for i in range(args.trace_steps):
                handle = built.runner.step(i)
            built.runner.sync(handle)
        kernels = device_kernels(load_trace(args.out / "trace"))
        # XLA names a fusion's kernel after the fusion; its jax op (what the model wrote) is in the HLO
        op_names = {
            name.replace(".", "_"): op for name, op in re.findall(r'%([\w.\-]+) = [^\n]*?op_name="([^"]+)"', hlo)
        }
        triton_collectives = triton_collective_names(hlo)
        for k in kernels:
            k["op"] = op_names.get(k["name"], k["op"])
            if k["name"].replace("-", "_") in triton_collectives:
                k["kind"] = "communication"
        first = min((k["device"] for k in kernels), default="")  # the first GPU, comparable with one
        result["profile"] = summarise([k for k in kernels if k["device"] == first], args.trace_steps)
        if args.devices > 1:
            result["profile_by_device"] = by_device(kernels, args.trace_steps)
            # what watch reads of a spread step: each GPU's collectives, and the part of them exposed
            result["collectives_by_device"] = per_device(
                [{**k, "op": f"collective {k['op']}"} if k.get("kind") == "communication" else k for k in kernels],
                args.trace_steps,
            )
        for bulky in (args.out / "trace").rglob("*.xplane.pb"):  # the perfetto JSON holds what is read
            bulky.unlink()
    return result


def torch_side(args) -> dict:
    import torch
    from torch_peers import make_step

    step, units = make_step(args.workload, args.peer, args.batch, args.seq_len or 0)
    result = {
        "side": "torch",
        "torch": torch.__version__,
        "mode": args.peer,
        "device": torch.cuda.get_device_name(),
        "throughput": timed(step, lambda _: torch.cuda.synchronize(), units),
    }
    if args.trace_steps:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for i in range(args.trace_steps):
                step(i)
            torch.cuda.synchronize()
        (args.out / "trace").mkdir(exist_ok=True)
        raw = args.out / "trace" / "torch_trace.json"
        profile.export_chrome_trace(str(raw))
        with open(raw, "rb") as f, gzip.open(f"{raw}.gz", "wb") as packed:
            packed.write(f.read())
        raw.unlink()
        result["profile"] = summarise(device_kernels(load_trace(args.out / "trace")), args.trace_steps)
        result["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    return result


def run_side(
    args, name: str, side: str, extra_env: dict, traced: bool, deadline: float, devices: int = 1, peer: str = "none"
) -> dict | None:
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    left = deadline - time.monotonic()
    if left < 60:
        print(f"-- {name}: skipped, {left:.0f} s of the budget left", flush=True)
        return None
    command = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--out",
        str(out),
        "--workload",
        args.workload,
        "--batch",
        str(args.batch),
        "--precision",
        args.precision,
        "--peer",
        peer,
        "--trace-steps",
        str(args.trace_steps if traced else 0),
        "--devices",
        str(devices),
    ]
    if args.seq_len:
        command += ["--seq-len", str(args.seq_len)]
    env = dict(
        os.environ,
        **extra_env,
        JAX_COMPILATION_CACHE_DIR="/tmp/step-kernels-jax-cache",
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    began = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=left)
    except subprocess.TimeoutExpired:
        print(f"-- {name}: stopped at the budget", flush=True)
        return None
    (out / "stderr.txt").write_text(proc.stderr[-200_000:])
    line = next((printed for printed in proc.stdout.splitlines() if printed.startswith("@@side ")), None)
    print(f"-- {name}: exit {proc.returncode} in {time.monotonic() - began:.0f} s", flush=True)
    return json.loads(line[len("@@side ") :]) if line else None


def table(results: dict) -> None:
    profiled, walls = {}, {}  # a column per profiled run, per GPU for a multi-GPU run
    for name, r in results.items():
        if r and "profile" in r:
            for device, profile in (r.get("profile_by_device") or {"": r["profile"]}).items():
                column = f"{name} {device.rsplit(':', 1)[-1]}" if device else name
                profiled[column], walls[column] = profile, r["throughput"]["step_ms"]
    names = list(profiled)
    if names:
        print(f"\n{'ms a step':22}" + "".join(f"{n[-13:]:>14}" for n in names))
        rows = [
            ("wall (untraced)", lambda n: walls[n]),
            ("trace span", lambda n: profiled[n]["span_ms"]),
            ("GPU busy", lambda n: profiled[n]["busy_ms"]),
            ("kernels a step", lambda n: profiled[n]["kernels_per_step"]),
        ]
        kinds = sorted({k for p in profiled.values() for k in p["by_kind_ms"]})
        rows += [(kind, lambda n, kind=kind: profiled[n]["by_kind_ms"].get(kind, 0.0)) for kind in kinds]
        for label, value in rows:
            print(f"{label:22}" + "".join(f"{value(n):14.2f}" for n in names))
    print(f"\n{'run':22}{'units/s':>12}{'step ms':>10}")
    for name, r in results.items():
        if r:
            print(f"{name:22}{r['throughput']['median']:12,.0f}{r['throughput']['step_ms']:10.2f}")
        else:
            print(f"{name:22}{'failed or skipped':>22}")


def main() -> int:
    parser = argparse.ArgumentParser()
    add_step_arguments(parser)
    parser.add_argument(
        "--peer",
        default="compiled",
        help="torch_peers.py's modes to run beside, comma-separated (compiled, compiled-model, eager), or none",
    )
    parser.add_argument("--trace-steps", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[], help="NAME=XLA_FLAGS, timed untraced")
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument(
        "--devices", type=int, default=1, help="also profile the data-parallel step on this many GPUs (--batch per GPU)"
    )
    parser.add_argument("--side", choices=("jax", "torch"), help=argparse.SUPPRESS)
    args = parse_step_arguments(parser)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.side:
        result = (jax_side if args.side == "jax" else torch_side)(args)
        print("@@side " + json.dumps(result), flush=True)
        return 0
    deadline = time.monotonic() + args.budget_s
    results = {"gpuscout": run_side(args, "gpuscout", "jax", {}, True, deadline)}
    if args.devices > 1:
        results[f"gpuscout x{args.devices}"] = run_side(
            args, f"gpuscout-x{args.devices}", "jax", {}, True, deadline, devices=args.devices
        )
    for peer in (p for p in args.peer.split(",") if p != "none"):
        results[f"torch {peer}"] = run_side(args, f"peer-{peer}", "torch", {}, True, deadline, peer=peer)
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        flags = " ".join(filter(None, (os.environ.get("XLA_FLAGS"), flags)))
        results[name] = run_side(args, name, "jax", {"XLA_FLAGS": flags}, False, deadline)
    (args.out / "summary.json").write_text(json.dumps(results, indent=1))
    for name, r in results.items():
        for k in ((r or {}).get("profile") or {}).get("longest", [])[:25]:
            print(f"{name:10} {k['ms']:7.2f} ms {k['calls']:5.1f}x {k['kind']:11} {k['name'][:70]}  {k['op'][:40]}")
    table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
