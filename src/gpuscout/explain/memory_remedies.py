"""The fix of an out-of-memory error on this machine: the allocation that failed, what the GPU has
and who else holds it, the framework's own reservation, and the batch that fits by gpuscout's
memory model."""

from __future__ import annotations

import math
import re

from gpuscout.explain.machine import Context, Machine

GiB = 2**30


# Bytes per element of TensorFlow's dtype names in OOM messages
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
}


# JAX's default: preallocate 75% of GPU memory at start (jax docs, "GPU memory allocation")
JAX_PREALLOCATE_SHARE = 0.75


def _gib(value: float) -> str:
    return f"{value / GiB:.2f} GiB"


def requested_bytes(facts: dict) -> float | None:
    if facts.get("bytes"):
        return float(facts["bytes"])
    if facts.get("shape") is not None:
        dims = [int(d) for d in re.findall(r"\d+", facts["shape"])]
        return float(math.prod(dims) * DTYPE_BYTES.get(facts.get("dtype", ""), 4))
    return None


def out_of_memory(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    parts = []
    asked = requested_bytes(facts)
    if asked is not None:
        parts.append(f"the allocation that failed: {_gib(asked)}")
    index = re.search(r"GPU:(\d+)", facts.get("device", ""))
    gpu = next(
        (g for g in machine.gpus if index and g.index == int(index.group(1))), machine.gpus[0] if machine.gpus else None
    )
    if gpu and gpu.memory_total_bytes:
        parts.append(f"GPU {gpu.index} ({gpu.name}) has {_gib(gpu.memory_total_bytes)}")
        if gpu.others_bytes:
            parts.append(
                f"other processes hold {_gib(gpu.others_bytes)} of it (pids "
                f"{', '.join(map(str, gpu.other_pids))}): stop them or use another GPU"
            )
        elif gpu.other_pids:
            parts.append(f"{len(gpu.other_pids)} other process(es) use it (pids {', '.join(map(str, gpu.other_pids))})")
    if name == "jax" and machine.env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() != "false":
        parts.append(
            f"jax takes {JAX_PREALLOCATE_SHARE:.0%} of the GPU when it starts "
            "(XLA_PYTHON_CLIENT_PREALLOCATE): a second jax or TensorFlow process on this GPU gets only the rest; "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false lets processes share it"
        )
    if name == "tensorflow" and machine.env.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() != "true":
        parts.append(
            "TensorFlow maps nearly all GPU memory at start unless memory growth is on "
            "(TF_FORCE_GPU_ALLOW_GROWTH=true, or tf.config.experimental.set_memory_growth): "
            "needed when the GPU is shared"
        )
    parts.append(_batch_advice(context, gpu))
    return "; ".join(p for p in parts if p)


def _batch_advice(context: Context, gpu) -> str:
    from gpuscout import workloads
    from gpuscout.core.spec import Precision
    from gpuscout.workloads import sizing

    generic = (
        "lower the batch size (halve it until it fits), then train in mixed precision "
        "(keras.mixed_precision.set_global_policy('mixed_bfloat16'); mixed_float16 before Ampere)"
    )
    if not (context.workload and gpu and gpu.memory_total_bytes):
        return generic
    try:
        workload = workloads.get(context.workload)
        precision = Precision(context.precision or "fp32")
    except Exception:
        return generic
    # the share gpuscout's own --batch-size auto leaves free for the framework (sizing.py), of
    # what other processes leave
    free = gpu.memory_total_bytes - (gpu.others_bytes or 0)
    budget = sizing.AUTO_MEMORY_SHARE * free
    if sizing.estimate_bytes(workload, 1, precision, context.seq_len) is None:
        return generic
    fits = sizing.largest_fitting_batch(workload, precision, context.seq_len, budget)
    advice = (
        f"gpuscout's memory model for {workload.name} at {precision.value}: batch {fits} per GPU fits "
        f"({sizing.AUTO_MEMORY_SHARE:.0%} of {_gib(free)}{' not held by others' if gpu.others_bytes else ''})"
        + (f", the run asked for {context.batch_size}" if context.batch_size else "")
    )
    if precision is Precision.fp32:
        half = (
            Precision.mixed_bfloat16
            if (gpu.compute_capability and float(gpu.compute_capability) >= 8.0)
            else Precision.mixed_float16
        )
        more = sizing.largest_fitting_batch(workload, half, context.seq_len, budget)
        advice += f"; in {half.value}, batch {more} (--precision {half.value})"
    return advice
