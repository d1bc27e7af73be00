"""How a data-parallel run's devices exchanged their gradients, in words.

Two runs of one model on the same GPUs can differ in nothing but when their gradient all-reduce
runs against the backward pass: XLA's scheduling flags (the latency-hiding scheduler, the
all-reduce combiner's bucket size, pipelined or synchronous collectives) and NCCL's algorithm
and protocol change the step time and nothing else in the record. This names them, from what
every record already keeps (the strategy the child reported and the environment it saw), so
stored runs of any age have it: `compare` never pools runs whose settings differ, `scale`'s
verdict says which one it measured.

What each framework does by default (docs/methodology.md, "Communication"):
- jax, gpuscout's per-replica step (since 2026-11-26): the gradients concatenated into buckets of
  a size per model (8 MiB for ResNet-50, 64 MiB for GPT-2 small and BERT-base), one all-reduce
  each, which XLA runs asynchronously beside the rest of the backward pass where it can.
- jax, Keras' DataParallel and gpuscout's step before: one `lax.pmean` of the gradient tree
  after the backward pass; XLA lowers it to an all-reduce per gradient, combines them into
  buckets and, with its default scheduling, runs many of them asynchronously beside the rest of
  the backward pass and the others after it or synchronously, as the model and XLA's version
  have it (two H100s, jax 0.11.2: GPT-2 small 13 of 15 buckets beside the backward pass; ResNet-50
  21.5 of 97.8 MiB; docs/benchmarks.md, "What two GPUs add").
- tensorflow (MirroredStrategy): Keras computes every gradient with one tape, then the strategy
  packs them into batched NCCL all-reduces, which wait for the last gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscout.core import units as fmt

if TYPE_CHECKING:
    from gpuscout.record.child import CollectiveSchedule
    from gpuscout.record.run import RunRecord

# XLA_FLAGS that move collectives against computation, and what this module calls them
# (xla/debug_options_flags.cc; openxla.org/xla/gpu_optimization_levels).
XLA_SCHEDULING_FLAGS = {
    "xla_gpu_enable_latency_hiding_scheduler": "latency-hiding scheduler",
    "xla_gpu_all_reduce_combine_threshold_bytes": "all-reduce combine threshold",
    "xla_gpu_enable_pipelined_all_reduce": "pipelined all-reduce",
    "xla_gpu_disable_async_collectives": "synchronous collectives",
    "xla_gpu_enable_highest_priority_async_stream": "priority stream for collectives",
    "xla_gpu_experimental_parallel_collective_overlap_limit": "parallel collective overlap limit",
    # gpuscout's child sets it false for jax over several GPUs (executor/local.py)
    "xla_gpu_unsupported_use_all_reduce_one_shot_kernel": "one-shot all-reduce kernel",
    # measured on two H200s, none a gain, each moving GPT-2's or ResNet-50's two-GPU throughput by up
    # to 2%: docs/benchmarks.md, "Seven more settings on two H200s"
    "xla_gpu_experimental_collective_start_as_early_as_possible": "collectives started as early as possible",
    "xla_gpu_experimental_enable_collective_multi_streaming": "collectives on several streams",
    "xla_gpu_enable_nccl_user_buffers": "NCCL user buffers",
    "xla_gpu_experimental_enable_nccl_symmetric_buffers": "NCCL symmetric buffers",
    "xla_gpu_nccl_collective_max_nchannels": "NCCL channels for collectives",
    # which operations run as CUDA graphs: with COLLECTIVES the all-reduces join them
    "xla_gpu_enable_command_buffer": "command buffers",
}
# NCCL's channels are SMs taken from the computation it runs beside (NCCL_MAX_NCHANNELS=8 cost GPT-2
# two points on two H100s: docs/benchmarks.md, "Small all-reduces to NCCL"); NCCL_MAX_CTAS is their
# newer name (NCCL >= 2.17; =4 cost GPT-2 12 points on four H200s, "GPT-2 small on four GPUs with
# nothing exchanged"), NCCL_CTA_POLICY (>= 2.27) asks for fewer of them, and NCCL_CGA_CLUSTER_SIZE
# groups them on sm90 (NCCL's default 4; 1 as PyTorch users set it for overlap: 89.6% against 90.0%
# on four H200s, 2026-11-27). NVLink SHARP (NVLS) is an algorithm of NVSwitch systems that the lent
# multi-GPU machines keep off (NCCL_NVLS_ENABLE=0). Names: NCCL's "Environment Variables".
NCCL_SETTINGS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_CTA_POLICY",
    "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_NVLS_ENABLE",
)


def xla_settings(xla_flags: str | None) -> list[str]:
    """The scheduling flags set in an XLA_FLAGS string, as 'name=value' in words, in a fixed order."""
    given = {}
    for token in (xla_flags or "").split():
        name, _, value = token.lstrip("-").partition("=")
        if name in XLA_SCHEDULING_FLAGS:
            given[name] = value or "true"
    return [
        f"{XLA_SCHEDULING_FLAGS[name]}={_value(name, given[name])}" for name in XLA_SCHEDULING_FLAGS if name in given
    ]


def _value(name: str, value: str) -> str:
    return _size(int(value)) if name.endswith("_bytes") and value.isdigit() else value


def _size(size_bytes: int) -> str:
    """An exact size in the largest binary unit that divides it (8388608 -> '8 MiB')."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes and size_bytes % scale == 0:
            return f"{size_bytes // scale} {unit}"
    return f"{size_bytes} B"


def describe(
    backend: str,
    devices: int,
    all_reduce: str | None,
    child_env: dict[str, str],
    gradient_bucket_bytes: int | None = None,
) -> str | None:
    """One line for a run over `devices` devices (None for one device: nothing was exchanged).
    `gradient_bucket_bytes`: the buckets gpuscout's jax step made (None: a pmean of each gradient,
    the step of records before 2026-11-26, or another strategy)."""
    if devices < 2:
        return None
    nccl = [f"{key}={child_env[key]}" for key in NCCL_SETTINGS if child_env.get(key)]
    if backend == "jax":
        xla = xla_settings(child_env.get("XLA_FLAGS"))
        bucket = gradient_bucket_bytes
        made = f"gradients in {_size(bucket)} buckets made by the step, " if bucket else ""
        # The setting, not the schedule: what XLA made of it depends on the model and XLA's version.
        if xla:
            return f"{made}all-reduces scheduled by XLA with {', '.join(xla + nccl)}"
        return made + "all-reduces scheduled by XLA (its default scheduling" + "".join(f"; {n}" for n in nccl) + ")"
    what = all_reduce or "the strategy's all-reduce"
    return f"{what} after the backward pass" + (f" ({', '.join(nccl)})" if nccl else "")


def as_compiled(schedule: CollectiveSchedule | None) -> str | None:
    """What the compiled step sent, in words (None when the record has no schedule)."""
    if schedule is None:
        return None
    if not schedule.collectives:
        return "as compiled, no collectives"
    beside = "none beside computation"
    if schedule.beside_compute:
        overlapped = fmt.bytes_(schedule.payload_bytes_beside_compute)
        beside = f"{schedule.beside_compute} of them ({overlapped}) beside computation"
    plural = "s" if schedule.collectives > 1 else ""
    sent = fmt.bytes_(schedule.payload_bytes)
    return f"as compiled, {schedule.collectives} collective{plural} of {sent} in all, {beside}"


def of(record: RunRecord, *, step_buckets: bool = True) -> str | None:
    """`describe` for a stored run record; without `step_buckets`, the settings a user gave alone
    (XLA's flags, NCCL's), not the buckets gpuscout's step made."""
    distribution = record.distribution
    return describe(
        record.backend.value,
        record.devices,
        distribution.all_reduce if distribution else None,
        record.env.child_env if record.env else {},
        distribution.gradient_bucket_bytes if distribution and step_buckets else None,
    )
