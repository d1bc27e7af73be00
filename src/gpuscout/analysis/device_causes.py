"""The verdict's causes on the device's side: mixed precision (with its speed-up measured among
stored benchmarks where there is one), XLA left off, most of the GPU's memory unused, and the
GPU's own health (other processes, throttling, errors)."""

from __future__ import annotations

import math
from statistics import median

from gpuscout.analysis import devices
from gpuscout.analysis import flags as flagging
from gpuscout.core.spec import BF16_COMPUTE_CAPABILITY, Precision
from gpuscout.record.watch import Cause, WatchedFit, WatchRecord

# fp16 tensor cores from Volta (7.0), bf16 from Ampere: CUDA C++ Programming Guide.
FP16_CC, BF16_CC = 7.0, BF16_COMPUTE_CAPABILITY
UNUSED_MEMORY_SHARE = 0.5
# This module's causes read a GPU: on a machine without one they were not looked at, and watch says so
NOT_CHECKED_ON_CPU = (
    "not checked without a GPU: mixed precision on tensor cores, how busy the GPU is, its memory, "
    "and its health (throttling, other processes on it)"
)


def mixed_precision(r: WatchRecord, main: WatchedFit, reference: tuple[float, str] | None) -> Cause | None:
    cc = float(r.gpu.compute_capability) if r.gpu and r.gpu.compute_capability else None
    if (
        cc is None
        or cc < FP16_CC
        or main.precision_policy is None
        or precision_of(main.precision_policy) is not Precision.fp32
    ):
        return None  # (a loop of the script's own: its precision is not known)
    policy = "mixed_bfloat16" if cc >= BF16_CC else "mixed_float16"
    if reference:
        speedup, basis = reference
        saving, measured = 1 - 1 / speedup, f"{speedup:.2f}x measured by gpuscout on this GPU kind ({basis})"
    else:
        saving, measured = None, "not measured here: `gpuscout tune --model ...` measures it on this GPU"
    return Cause(
        code="fp32_on_tensor_cores",
        saving_share=saving if saving and saving > 0 else None,
        message=f"float32 on a GPU with {'bf16' if cc >= BF16_CC else 'fp16'} tensor cores "
        f"(compute capability {r.gpu.compute_capability})",
        evidence=f"the policy is {main.precision_policy}; {measured}",
        fix=f"train in {policy} (Keras keeps the weights in float32"
        + ("; fp16 adds loss scaling in fit)" if policy == "mixed_float16" else ")"),
        code_snippet=f"keras.mixed_precision.set_global_policy('{policy}')   # before building the model",
    )


def xla_off(r: WatchRecord, main: WatchedFit) -> Cause | None:
    """Advice that follows what Keras itself does on the device (bench's defaults do the same):
    on jax, jit_compile=False runs the step op by op, eagerly, on any device; on tensorflow, Keras
    turns XLA off on a CPU-only machine and under tf.distribute (jit_compile='auto'), and forcing it
    on there loses (keras-io's text classifier: 0.10x of its own fit, docs/benchmarks.md)."""
    if main.run_eagerly:  # Keras' debugging mode: nothing compiled, on either backend
        return Cause(
            code="xla_off",
            saving_share=None,
            message="the train step runs eagerly (run_eagerly=True): op by op in Python, nothing compiled",
            evidence=f"model.run_eagerly is True ({main.backend} backend)",
            fix="drop run_eagerly=True (Keras' debugging mode) from compile and any `model.run_eagerly = "
            "True`; `gpuscout tune` measures the gain",
            code_snippet="model.compile(optimizer, loss, run_eagerly=False)",
        )
    if main.jit_compile or main.jit_compile is None:
        return None
    if main.backend == "jax":
        return Cause(
            code="xla_off",
            saving_share=None,
            message="the train step runs op by op (jit_compile=False): jax compiles nothing",
            evidence="model.jit_compile is False (jax backend; Keras' default there is to compile)",
            fix="let Keras compile the step (its default on jax; the first step then compiles; "
            "`gpuscout tune` measures the gain)",
            code_snippet="model.compile(optimizer, loss, jit_compile=True)",
        )
    if main.backend != "tensorflow" or main.strategy or r.gpu is None:
        return None
    return Cause(
        code="xla_off",
        saving_share=None,
        message="the train step is not XLA-compiled",
        evidence="model.jit_compile is False (tensorflow backend, on a GPU)",
        fix="compile it with XLA (the first step then compiles; `gpuscout tune` measures the gain)",
        code_snippet="model.compile(optimizer, loss, jit_compile=True)",
    )


def unused_memory(r: WatchRecord, main: WatchedFit | None) -> Cause | None:
    total = r.gpu.memory_total_bytes if r.gpu else None
    nvml = r.telemetry.memory_used_max_bytes if r.telemetry and not jax_preallocated(r) else None
    peak = (main.peak_memory_bytes if main else None) or nvml  # what was used, never what was reserved
    if not total or not peak or peak >= UNUSED_MEMORY_SHARE * total:
        return None
    source = "the framework's allocator" if main and main.peak_memory_bytes else "NVML"
    if main is None or not main.batch_size:
        return Cause(
            code="unused_memory",
            saving_share=None,
            message=f"{peak / total:.0%} of the GPU's memory in use at most",
            evidence=f"used at peak {peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB ({source})",
            fix="a larger batch would likely fit (`gpuscout tune --parts batch` finds the largest for a "
            "model), with the learning rate scaled",
        )
    # an upper bound: memory taken as proportional to the batch (the weights' share makes it less)
    largest = int(main.batch_size * 0.9 * total / peak) // 8 * 8
    return Cause(
        code="unused_memory",
        saving_share=None,
        message=f"{peak / total:.0%} of the GPU's memory used at batch {main.batch_size}",
        evidence=f"used at peak {peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB ({source})",
        fix=f"a larger batch fits: up to about {largest} (proportional estimate, an upper bound; "
        "`gpuscout tune --model ... --parts batch` finds it), with the learning rate scaled",
    )


def jax_preallocated(r: WatchRecord) -> bool:
    """JAX took most of the GPU's memory at start (75% unless told otherwise: jax.readthedocs.io,
    GPU memory allocation): NVML's figure is then what was reserved, not what was used."""
    main = r.main
    env = r.env.child_env or {}
    off = (
        env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() in ("false", "0")
        or env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform"
    )
    return bool(main and main.backend == "jax" and not off)


def gpu_health(r: WatchRecord, other_pids: list[int]) -> list[Cause]:
    out = []
    if other_pids:
        flag = flagging.shared_flag(other_pids)
        out.append(
            Cause(
                code="gpu_shared",
                saving_share=None,
                message=flag.message,
                evidence="NVML's process list",
                fix=flag.hint,
            )
        )
    t, gpu = r.telemetry, r.gpu
    if t is not None:
        flag = flagging.throttle_flag(t.slowdown_reasons, t.sm_clock_mean_mhz, gpu.sm_clock_max_mhz if gpu else None)
        if flag:
            out.append(
                Cause(code="throttled", saving_share=None, message=flag.message, evidence="NVML clocks", fix=flag.hint)
            )
    if (traced := devices.traced_straggler(r)) is not None:  # the trace tells computing from waiting
        out.append(traced)
    elif r.telemetry_per_gpu:
        flag = flagging.straggler_flag(r.telemetry_per_gpu)
        if flag:
            out.append(
                Cause(
                    code="straggler",
                    saving_share=None,
                    message=flag.message,
                    evidence="per-GPU clocks and slowdown reasons",
                    fix=flag.hint,
                )
            )
        elif (busier := devices.uneven(r)) is not None:  # no clock apart: is one GPU busier than another?
            out.append(busier)
    return out


def precision_reference(records: list, forward_flops: float | None) -> tuple[float, str] | None:
    """Mixed precision's measured speed-up (mixed median / fp32 median, samples/s) among stored
    benchmark `records` of one GPU kind: of the workload, batch and backend measured in both fp32
    and a mixed policy, the one whose FLOPs per sample are nearest the watched model's (any, when
    they are unknown)."""
    pairs: dict[tuple, dict[str, list[float]]] = {}
    flops_of: dict[tuple, float | None] = {}
    for r in records:
        if r.kind != "benchmark" or not r.ok or r.mode != "training" or not r.samples_per_s or r.devices != 1:
            continue
        key = (r.workload, r.batch_size, r.backend.value, r.data.value, r.seq_len)
        kind = "fp32" if r.precision is Precision.fp32 else "mixed"
        pairs.setdefault(key, {}).setdefault(kind, []).append(r.samples_per_s)
        flops_of[key] = r.training_flops_per_sample
    both = [k for k, v in pairs.items() if "fp32" in v and "mixed" in v]
    if not both:
        return None

    def distance(key: tuple) -> float:
        theirs = flops_of[key]
        if not forward_flops or not theirs:
            return math.inf
        return abs(math.log(theirs / (3 * forward_flops)))

    key = min(both, key=distance)
    fp32, mixed = median(pairs[key]["fp32"]), median(pairs[key]["mixed"])
    runs = len(pairs[key]["fp32"]) + len(pairs[key]["mixed"])
    return mixed / fp32, f"{key[0]} batch {key[1]} on {key[2]}, {runs} stored runs"


def precision_of(policy: str | None) -> Precision:
    """gpuscout's precision for a Keras policy name (float32 -> fp32)."""
    return {"mixed_bfloat16": Precision.mixed_bfloat16, "mixed_float16": Precision.mixed_float16}.get(
        policy or "", Precision.fp32
    )
