"""One place for each rule a run must follow, checked before anything runs.

Every verb that plans runs (bench, tune, scale, sweep, inference) asks these functions, so a rule
(a GPU index that exists, a precision the GPU has tensor cores for, a sequence length only for
token workloads, a timeout above zero) is written once and says the same thing everywhere. Each
raises UsageError: one line naming what is wrong, exit code 2, nothing run or stored. RunSpec's
own validators (spec.py) guard what a spec may combine; build_spec turns them into the same kind
of line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscout.core import backends, durations
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import BF16_COMPUTE_CAPABILITY, Backend, Distribution, Precision
from gpuscout.telemetry.nvml import Nvml
from gpuscout.workloads import sizing
from gpuscout.workloads.base import Workload


@dataclass(frozen=True)
class DeviceChoice:
    """--gpu N or --cpu, as the user gave them (neither: the first GPU, else the CPU)."""

    gpu: int | None = None
    cpu: bool = False


def device(choice: DeviceChoice, nvml: Nvml) -> tuple[int | None, str | None]:
    """(GPU index, or None for the CPU; a notice to show once, or None)."""
    if choice.cpu and choice.gpu is not None:
        raise UsageError("--gpu and --cpu exclude each other: pick one")
    if choice.cpu:
        return None, None
    if choice.gpu is not None:
        gpu_indices([choice.gpu], nvml)
        return choice.gpu, None
    if nvml.available and nvml.count > 0:
        return 0, None
    reason = nvml.error or "NVML reports no GPU"
    return None, f"no NVIDIA GPU found ({reason}): running on the CPU; telemetry is off"


def gpu_indices(indices: list[int], nvml: Nvml) -> list[int]:
    """The GPUs asked for, each checked to exist."""
    if indices and not nvml.available:
        raise UsageError(
            f"GPU {indices[0]} asked for, but NVML found no GPU ({nvml.error}): use --cpu, or run `gpuscout doctor`"
        )
    for index in indices:
        if index < 0 or index >= nvml.count:
            raise UsageError(
                f"GPU index {index} not found: this machine has {nvml.count} GPU(s), indices 0..{nvml.count - 1}"
            )
    return list(indices)


def backend(name: str) -> Backend:
    return backends.resolve(name)


def precision(backend_: Backend, name: str, nvml: Nvml, gpu_index: int | None) -> Precision:
    """A precision the backend runs and the run's GPU has tensor cores for."""
    chosen = backends.check_precision(backend_, name)
    if chosen is Precision.mixed_bfloat16 and gpu_index is not None and not has_bf16(nvml, gpu_index):
        cc = nvml.gpu(gpu_index).compute_capability
        raise UsageError(
            f"GPU {gpu_index} (compute capability {cc}) has no bfloat16 tensor cores: use --precision mixed_float16"
        )
    return chosen


def has_bf16(nvml: Nvml, gpu_index: int) -> bool:
    cc = nvml.gpu(gpu_index).compute_capability
    return cc is None or float(cc) >= BF16_COMPUTE_CAPABILITY


def at_least(option: str, value: float | None, low: float, what: str = "") -> None:
    """`value` (when given) is >= low: --batch-size 1, --repeats 1."""
    if value is not None and value < low:
        raise UsageError(f"{option} must be >= {low:g}{what}, got {value:g}")


def above_zero(option: str, value: float | None, unit: str = "") -> None:
    """`value` (when given) is > 0: --timeout, --budget-minutes, --price."""
    if value is not None and value <= 0:
        raise UsageError(f"{option} must be > 0{unit}, got {value:g}")


def duration_s(option: str, text: str | None) -> float | None:
    """A duration option (core/durations.py: '90', '90s', '10m', '1h30m'; bare seconds) as seconds;
    None stays None."""
    return None if text is None else durations.seconds(text, option)


# No step count past 2^53 (every integer below it is exact as a float: cli's MAX_OPTION)
MAX_STEP = 2**53


def step_range(option: str, text: str | None) -> tuple[int, int] | None:
    """'20:25' (training steps, 1-based, both included) as (20, 25); None stays None."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d{1,20})\s*:\s*(\d{1,20})\s*", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_STEP:
        raise UsageError(
            f"{option} must be FIRST:LAST training steps with 1 <= FIRST <= LAST <= 2^53, e.g. 20:25, got {text[:40]!r}"
        )
    return int(match.group(1)), int(match.group(2))


def seq_len(workload: Workload, value: int | None) -> int | None:
    """The sequence length of a run: only token workloads have one (the workload's default when
    not given), within the model's positions."""
    if not workload.is_sequence:
        if value is not None:
            raise UsageError(f"--seq-len applies to token workloads only, not {workload.name}")
        return None
    if value is not None and not 1 <= value <= workload.max_seq_len:
        raise UsageError(f"--seq-len {value} is outside 1..{workload.max_seq_len} for {workload.name}")
    return value or workload.default_seq_len


# Keras fit's default batch size: a CPU run's default is never larger (a GPU-sized batch of 512
# took resnet18_cifar 297 s to compile on a CPU and timed out at 30 minutes)
CPU_DEFAULT_BATCH = 32


def xla(backend_: Backend, asked: bool | None, distribution: Distribution, on_gpu: bool = True) -> bool:
    """Whether the step is XLA-compiled: asked, or what Keras' own fit does (jit_compile="auto",
    keras/src/trainers/trainer.py _resolve_auto_jit_compile): jax always; tensorflow with XLA
    alone on a GPU, without it under a tf.distribute strategy (spec.py says why) and on a CPU-only
    machine ("Disable XLA on CPU-only machines": on this project's CPU machine, XLA ran
    keras-io's text classifier at 0.10x of its own fit: docs/benchmarks.md, issue 19)."""
    if asked is not None:
        return asked
    return backend_ is Backend.jax or (distribution is Distribution.single and on_gpu)


def cpu_batch(default: int) -> int:
    return min(default, CPU_DEFAULT_BATCH)


def memory_total(nvml: Nvml, gpu_index: int | None) -> int | None:
    return nvml.gpu(gpu_index).memory_total_bytes if gpu_index is not None else None


def fits(
    workload: Workload,
    per_device_batch: int,
    precision_: Precision,
    seq: int | None,
    memory_total_bytes: int | None,
    where: str = "",
) -> None:
    """Refuse a run whose memory estimate is clearly over the GPU's memory (sizing.py)."""
    reason = sizing.clearly_too_big(workload, per_device_batch, precision_, seq, memory_total_bytes)
    if reason:
        raise UsageError(f"{reason}{where} (estimate: docs/methodology.md; --no-fit-check runs it anyway)")
