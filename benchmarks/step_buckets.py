"""Gradient buckets made in the step against XLA's combiner (issue 34), in one process on one
machine: gpuscout's one-GPU step, its per-replica step on `--devices` GPUs as `scale` ran it before
2026-11-26 (a `lax.pmean` of each array; XLA combines them into buckets, then slices them apart
with a copy kernel each: 292 a step in two-GPU ResNet-50), and the same step with each bucket size
of `--buckets-mib` (`jax_replicas.bucketed_mean`: the step concatenates, averages and slices
itself; `scale` now runs it at the workload's size). `SIZE:bfloat16` exchanges the gradients in
bfloat16; `SIZE:none` exchanges nothing: each GPU's compute as in the data-parallel step with no
NCCL kernel beside it, what the step would cost if the exchange were free (issue 48). Set XLA_FLAGS
as gpuscout's child does (executor/local.py) to measure what `scale` measures.

    python benchmarks/step_buckets.py --out DIR [--workload resnet50] [--batch N]
        [--precision mixed_bfloat16] [--seq-len N] [--devices 2] [--buckets-mib 25,64,64:bfloat16,64:none]
        [--trace-steps 2]

For each: samples/s over 5 windows of >= 2 s (median), efficiency against the one-GPU step, the
compiled step's collectives (how many, how many with kernels beside them), and from
`--trace-steps` traced steps GPU 0's kernels a step, its copies among them, its busy time and
its span, and in the summary each kernel's time a step (`longest`: compare a kernel alone and beside
NCCL). Writes DIR/summary.json; prints a table last. On a CPU (logical devices:
XLA_FLAGS=--xla_force_host_platform_device_count=2) the trace has no kernels: a rehearsal.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path

from built_step import add_step_arguments, parse_step_arguments
from step_kernels import device_kernels, load_trace, summarise, timed


@contextlib.contextmanager
def exchanging(exchange: bool):
    """`exchange` False: the step compiled (on its first call, inside this block) with every
    `lax.pmean` an identity behind an optimisation barrier, so the buckets are still concatenated
    and sliced but nothing crosses between GPUs: each GPU's compute as in the data-parallel step,
    with no NCCL kernel beside it (the replicas then train apart; a measurement, not a step)."""
    if exchange:
        yield
        return
    import jax

    original = jax.lax.pmean
    jax.lax.pmean = lambda x, axis_name, **_: jax.tree.map(jax.lax.optimization_barrier, x)
    try:
        yield
    finally:
        jax.lax.pmean = original


def measure(spec, bucket_bytes: int | None, out: Path, trace_steps: int, wire: str | None = None) -> dict:
    import jax
    from built_step import build

    from gpuscout.child import jax_replicas
    from gpuscout.child.collectives import collectives
    from gpuscout.measure.trace_kernels import per_device
    from gpuscout.workloads import get

    original = jax_replicas.per_replica_train_step
    exchange = wire != "none"
    label, wire = wire, (wire if exchange else None)
    jax_replicas.per_replica_train_step = lambda model, mesh, _default=None: original(model, mesh, bucket_bytes, wire)
    try:
        built = build(spec)
    finally:
        jax_replicas.per_replica_train_step = original
    per_sample = get(spec.workload).units_per_sample(spec.seq_len)
    with exchanging(exchange):
        throughput = timed(built.runner.step, built.runner.sync, spec.batch_size * per_sample)
        result = {
            "devices": spec.devices,
            "bucket_bytes": bucket_bytes,
            "wire": label,
            "throughput": throughput,
            "samples_per_s": throughput["median"] / per_sample,
        }
        if spec.devices > 1:
            found, _ = collectives(built.compiled().as_text())
            result["collectives"] = len(found)
            result["beside_compute"] = sum(1 for c in found if c["compute_between"])
        if trace_steps and jax.default_backend() == "gpu":
            trace = out / "trace"
            with jax.profiler.trace(str(trace), create_perfetto_trace=True):
                handle = None
                for i in range(trace_steps):
                    handle = built.runner.step(i)
                built.runner.sync(handle)
            kernels = device_kernels(load_trace(trace))
            first = min((k["device"] for k in kernels), default="")
            mine = [k for k in kernels if k["device"] == first]
            profile = summarise(mine, trace_steps, top=1000)
            result["profile"] = {
                "kernels_per_step": profile["kernels_per_step"],
                "busy_ms": profile["busy_ms"],
                "span_ms": profile["span_ms"],
                "by_kind_ms": profile["by_kind_ms"],
                "longest": profile["longest"],
                "copies_per_step": sum(1 for k in mine if "memcpy" in k["name"].lower()) / trace_steps,
            }
            # every GPU's busy time, collectives, and computation slowed beside them (what watch reads)
            result["per_device"] = per_device(kernels, trace_steps)
            for bulky in trace.rglob("*.xplane.pb"):
                bulky.unlink()
    del built
    gc.collect()
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    add_step_arguments(parser)
    parser.set_defaults(workload="resnet50")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument(
        "--buckets-mib",
        default="25,64",
        help="sizes; SIZE:bfloat16 exchanges that size's gradient buckets in bfloat16, "
        "SIZE:none exchanges nothing (each GPU's compute alone, see exchanging)",
    )
    parser.add_argument("--trace-steps", type=int, default=2)
    parser.add_argument("--skip-pmean", action="store_true", help="no point for the pmean of each array")
    args = parse_step_arguments(parser)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        # Each logical device's all-reduce holds a thread of XLA's CPU pool while it waits (as gpuscout's
        # child sets it, executor/local.py): without it the 2-core rehearsal deadlocked in the first one.
        os.environ.setdefault("NPROC", str((os.cpu_count() or 1) + 2 * args.devices))
    import jax
    from built_step import require_devices, step_spec

    require_devices(args.devices)
    sizes = [(None, None)] * (not args.skip_pmean) + [
        (int(float(m.split(":")[0]) * 2**20), (m.split(":") + [None])[1]) for m in args.buckets_mib.split(",") if m
    ]
    results = []
    one = step_spec(args.workload, args.precision, args.batch, args.seq_len, 1)
    results.append({"name": "1 device", **measure(one, None, args.out / "one", args.trace_steps)})
    several = step_spec(args.workload, args.precision, args.batch, args.seq_len, args.devices)
    for size, wire in sizes:
        name = "pmean of each" if size is None else f"buckets of {size / 2**20:g} MiB" + (f", {wire}" if wire else "")
        results.append(
            {
                "name": name,
                **measure(several, size, args.out / name.replace(" ", "_").replace(",", ""), args.trace_steps, wire),
            }
        )
        summary = {
            "workload": args.workload,
            "precision": args.precision,
            "batch_per_device": args.batch,
            "jax": jax.__version__,
            "device": jax.devices()[0].device_kind,
            "results": results,
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    base = results[0]["samples_per_s"]
    print(f"{args.workload} {args.precision}, batch {args.batch}/device, {jax.devices()[0].device_kind}")
    print(
        f"{'step':22} {'samples/s':>10} {'eff':>6} {'coll':>5} {'beside':>6} {'kernels':>8} {'copies':>7} "
        f"{'busy ms':>8} {'span ms':>8}"
    )
    for r in results:
        p = r.get("profile") or {}
        eff = r["samples_per_s"] / (r["devices"] * base)
        print(
            f"{r['name']:22} {r['samples_per_s']:>10.1f} {eff:>6.3f} {r.get('collectives', 0):>5} "
            f"{r.get('beside_compute', 0):>6} {p.get('kernels_per_step', 0):>8.0f} "
            f"{p.get('copies_per_step', 0):>7.0f} "
            f"{p.get('busy_ms', 0):>8.2f} {p.get('span_ms', 0):>8.2f}"
        )
    kinds = sorted({kind for r in results for kind in (r.get("profile") or {}).get("by_kind_ms", {})})
    if kinds:
        print("GPU 0's kernels by kind, ms a step")
        print(f"{'step':22} " + " ".join(f"{kind[:11]:>11}" for kind in kinds))
        for r in results:
            by_kind = (r.get("profile") or {}).get("by_kind_ms", {})
            print(f"{r['name']:22} " + " ".join(f"{by_kind.get(kind, 0):>11.2f}" for kind in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
