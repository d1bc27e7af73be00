"""Scaling arithmetic and its diagnosis: speedup, efficiency, the step time outside compute, an
all-reduce estimate, and the likely cause when a GPU count scales below what its link should give.

Conventions (docs/methodology.md, "Scaling"):
- speedup(N) = throughput(N) / throughput(1), both in samples/s of the whole run;
- efficiency(N) = speedup(N) / N, in weak and strong scaling alike;
- the step that N GPUs would take with no cost of being N: the one-GPU step in weak scaling
  (each GPU does one GPU's work), the one-GPU step / N in strong scaling; what the measured step
  takes beyond it is "outside compute": all-reduce, synchronisation, stragglers, and in strong
  scaling also the lower efficiency of a smaller per-GPU batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Data-parallel efficiency expected within one host, by the link between its GPUs: `scale` judges
# each count by it and `recommend` assumes it where nothing was measured. Over NVLink, PyTorch DDP
# and gpuscout's own step reached 97-99% with ResNet-50 and BERT-base at 2 and 4 H100s/H200s
# (docs/benchmarks.md, issues 8 and 48; 8 GPUs not measured): 95% leaves a run's spread, and a
# model below it has a cause worth naming (GPT-2 small's 92% at 16 sequences a GPU became 98% at
# 32). PCIe carries a seventh of NVLink's bytes (x16 Gen5 63 GB/s a direction against 450): 85%,
# assumed (no PCIe host was lent), and for a link not read (logical CPU devices, no topology).
EXPECTED_EFFICIENCY = {"NVLink": 0.95, "PCIe": 0.85}
# Per direction, x16 (PCI-SIG: 8, 16, 32 GT/s per lane at 128b/130b encoding).
PCIE_GBS_PER_DIRECTION = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
GRADIENT_BYTES_PER_PARAM = 4  # Keras keeps float32 variables under mixed precision: fp32 gradients
INPUT_WAIT_CAUSE = 0.05  # the TensorFlow profiler's "moderately input-bound" threshold (flags.py)
# Outside-compute share at which the per-GPU batch is "small": what NVLink's expectation leaves
OVERHEAD_SMALL_BATCH = 1 - EXPECTED_EFFICIENCY["NVLink"]
# The all-reduce estimate must explain at least this share of the time outside compute before
# the gradient volume (and so the batch it is amortised over) is named as the cause. ResNet-50
# bf16 on two H200s spent 4.8 ms outside compute against a 0.23 ms all-reduce estimate: the
# time went to 150+ small batch-norm collectives instead (docs/benchmarks.md, "Scaling").
ALLREDUCE_EXPLAINS = 0.25
# Keras 3.15's jax trainer computes each batch's gradients over the whole sharded batch, so XLA
# all-reduces them in every step; an optimizer's gradient_accumulation_steps adds them up after
# that (the compiled step of an AdamW(gradient_accumulation_steps=2) under DataParallel on two CPU
# devices: its one all-reduce outside the optimizer's conditionals; docs/benchmarks.md). Said by
# `scale`'s small_batch and by watch's exchange causes (analysis/devices.py).
NO_ACCUMULATION_ON_JAX = "Keras' gradient_accumulation_steps would not: on jax it adds up gradients already exchanged"


def expected_efficiency(devices: int, interconnect: str | None) -> float:
    """What `devices` GPUs joined by `interconnect` (NVLink | PCIe | None: not read) should reach."""
    return 1.0 if devices == 1 else EXPECTED_EFFICIENCY.get(interconnect, EXPECTED_EFFICIENCY["PCIe"])


def speedup(throughput: float, baseline_throughput: float) -> float:
    return throughput / baseline_throughput


def efficiency(speedup_value: float, devices: int) -> float:
    return speedup_value / devices


def ideal_step_s(baseline_step_s: float, devices: int, mode: str) -> float:
    """The step time N devices would take at perfect scaling (see the module's conventions)."""
    return baseline_step_s if mode == "weak" else baseline_step_s / devices


def outside_compute(step_s: float, baseline_step_s: float, devices: int, mode: str) -> tuple[float, float]:
    """(seconds per step beyond the ideal, their share of the step); never below zero."""
    extra = max(0.0, step_s - ideal_step_s(baseline_step_s, devices, mode))
    return extra, extra / step_s


def link_gbs(interconnect: str | None, nvlink_gbs: float | None, pcie_gen: int | None) -> float | None:
    """Peak bandwidth one way between two GPUs, GB/s. The catalog's NVLink figure is the
    datasheet's total of both directions, hence the half."""
    if interconnect == "NVLink" and nvlink_gbs:
        return nvlink_gbs / 2
    if interconnect == "PCIe" and pcie_gen:
        return PCIE_GBS_PER_DIRECTION.get(pcie_gen)
    return None


def allreduce_s(params: int, devices: int, gbs: float | None) -> float | None:
    """A ring all-reduce of the gradients at peak link bandwidth: each GPU sends and receives
    2(N-1)/N of the bytes (NCCL's bus-bandwidth convention, nccl-tests PERFORMANCE.md). A lower
    bound: real all-reduce reaches a part of the peak, and overlaps the backward pass."""
    if devices < 2 or not gbs or not params:
        return None
    return 2 * (devices - 1) / devices * params * GRADIENT_BYTES_PER_PARAM / (gbs * 1e9)


def against_each_alone(
    samples_per_s: float, windows: list[float], used: list[int], alone: dict[int, tuple[float, list[float]]], ratio_ci
) -> dict | None:
    """Efficiency of a run over the GPUs `used` against each of them measured alone (`alone`: GPU
    -> its one-GPU samples/s and window rates). Data parallelism steps in lockstep, so N GPUs can
    at most run at N times the slowest of them alone: a GPU that is slower on its own (one of two
    H200s ran GPT-2 3.3% slower alone at its power limit, docs/benchmarks.md) is not communication
    lost. None when a GPU of the run was not measured alone."""
    if len(used) < 2 or any(g not in alone for g in used):
        return None
    slowest = min(used, key=lambda g: alone[g][0])
    rate, rates = alone[slowest]
    low, high = ratio_ci(windows, rates)
    devices = len(used)
    return {
        "value": samples_per_s / rate / devices,
        "ci95_low": low / devices,
        "ci95_high": high / devices,
        "slowest_gpu": slowest,
        "slowest_vs_first": rate / alone[used[0]][0],
        "alone_samples_per_s": {str(g): alone[g][0] for g in used},
    }


@dataclass(frozen=True)
class Cause:
    # failed | cpu_devices | input_pipeline | straggler | not_nccl | pcie | sync_batchnorm | small_batch | unexplained
    code: str
    message: str
    try_: str  # what to try

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "try": self.try_}


@dataclass(frozen=True)
class Situation:
    """What the diagnosis looks at for one GPU count (scale.py fills it from the records)."""

    devices: int
    mode: str
    device_kind: str  # gpu | cpu
    efficiency: float | None
    status: str
    data: str
    input_wait_share: float | None
    straggler: str | None  # the straggler flag's message
    all_reduce: str | None  # what the framework used
    backend: str
    interconnect: str | None  # NVLink | PCIe | None (unknown, CPU)
    per_device_batch_size: int
    overhead_share: float | None
    allreduce_estimate_s: float | None
    step_s: float | None
    batchnorm_layers: int | None = None
    outside_s: float | None = None
    batchnorm: str | None = None  # per_replica | global: the statistics the run's BN layers used
    largest_batch: int | None = None  # the per-GPU batch that gpuscout's memory model fits on this GPU

    def to_dict(self) -> dict:
        return asdict(self)


def batch_multiple(compute_s: float, outside_s: float, expected: float) -> tuple[int, float]:
    """The smallest of 2, 4 and 8 times the per-GPU batch at which the same time outside compute
    (the gradients' bytes do not grow with the batch) in a step of that many times the compute
    would leave `expected` efficiency, and that efficiency; 8 where none does. An estimate: a longer
    backward pass also hides more of the exchange (GPT-2 small on two H200s, 2.7 ms of 35.5 outside
    compute: 96.0% estimated at 32 sequences a GPU, 98.0% measured; docs/benchmarks.md)."""
    for multiple in (2, 4, 8):
        reached = multiple * compute_s / (multiple * compute_s + outside_s)
        if reached >= expected:
            break
    return multiple, reached


def _larger_batch(s: Situation) -> str:
    """`--batch-size N: ...` for weak scaling where the step and its time outside compute are known."""
    if s.mode != "weak" or not s.outside_s or not s.step_s or s.step_s <= s.outside_s:
        return "weak scaling: --batch-size; "
    expected = expected_efficiency(s.devices, s.interconnect)
    multiple, reached = batch_multiple(s.step_s - s.outside_s, s.outside_s, expected)
    larger = multiple * s.per_device_batch_size
    memory = (
        "if it fits in memory"
        if s.largest_batch is None
        else f"and gpuscout's memory model fits up to {s.largest_batch} a GPU"
        if larger <= s.largest_batch
        else f"but gpuscout's memory model fits at most {s.largest_batch} a GPU"
    )
    return (
        f"--batch-size {larger}: the same {s.outside_s * 1e3:.1f} ms outside compute in a step {multiple}x as "
        f"long would leave about {reached:.0%}, {memory}; "
    )


def diagnose(s: Situation) -> list[Cause]:
    """The likely causes of scaling below expectation, most specific evidence first; empty
    when the count scales as expected."""
    if s.status != "ok":
        return [
            Cause(
                "failed",
                f"the {s.devices}-device run ended {s.status}",
                "see the run's error (gpuscout results show RUN_ID); a timeout usually means a hung collective: "
                "check NCCL_DEBUG=INFO output and the topology",
            )
        ]
    if s.efficiency is None or s.efficiency >= expected_efficiency(s.devices, s.interconnect):
        return []
    causes = []
    if s.device_kind == "cpu":
        causes.append(
            Cause(
                "cpu_devices",
                "the devices are logical CPU devices sharing the same cores: their scaling says nothing about GPUs",
                "run on GPUs to measure scaling",
            )
        )
    if s.data != "synthetic" and (s.input_wait_share or 0) >= INPUT_WAIT_CAUSE:
        causes.append(
            Cause(
                "input_pipeline",
                f"the input pipeline: {s.input_wait_share:.0%} of the step waiting for "
                "input with every GPU asking for its share",
                "parallelise the host pipeline (tf.data map num_parallel_calls=AUTOTUNE, prefetch), cache "
                "decoded data, or check with --data synthetic what the GPUs reach without it",
            )
        )
    if s.straggler:
        causes.append(Cause("straggler", s.straggler, "fix or leave out the slow GPU (scale --gpus)"))
    if (
        s.device_kind == "gpu"
        and s.backend == "tensorflow"
        and s.all_reduce
        and "Nccl" not in s.all_reduce
        and "NCCL" not in s.all_reduce
    ):
        causes.append(
            Cause(
                "not_nccl",
                f"gradients were summed by {s.all_reduce}, not NCCL",
                "MirroredStrategy(cross_device_ops=tf.distribute.NcclAllReduce()); check that NCCL "
                "is in the TensorFlow build (gpuscout doctor)",
            )
        )
    if s.interconnect == "PCIe":
        estimate = (
            f" (the gradient all-reduce alone takes >= {s.allreduce_estimate_s * 1e3:.1f} ms)"
            if s.allreduce_estimate_s
            else ""
        )
        causes.append(
            Cause(
                "pcie",
                f"the GPUs share PCIe only, no NVLink{estimate}",
                "a larger per-GPU batch amortises the all-reduce; GPUs with NVLink (SXM, NVL) scale better",
            )
        )
    if s.batchnorm == "global" and s.batchnorm_layers:
        causes.append(
            Cause(
                "sync_batchnorm",
                f"the model's {s.batchnorm_layers} BatchNormalization layers average their "
                "statistics over the global batch (--batchnorm global): small all-reduces in every "
                "forward and backward pass, on the critical path",
                "drop --batchnorm global: per-GPU statistics (gpuscout's default, as PyTorch DDP and "
                "tf.distribute.MirroredStrategy) need only the gradient all-reduce",
            )
        )
    explained = (
        s.allreduce_estimate_s is None or not s.outside_s or s.allreduce_estimate_s >= ALLREDUCE_EXPLAINS * s.outside_s
    )
    small = (s.overhead_share or 0) >= OVERHEAD_SMALL_BATCH or (
        s.allreduce_estimate_s is not None and s.step_s and s.allreduce_estimate_s >= OVERHEAD_SMALL_BATCH * s.step_s
    )
    if small and explained and s.device_kind == "gpu":
        causes.append(
            Cause(
                "small_batch",
                f"the per-GPU batch of {s.per_device_batch_size} is small for this model: "
                f"{(s.overhead_share or 0):.0%} of each step is spent outside compute",
                f"raise the per-GPU batch ({_larger_batch(s)}in your own training too), or "
                "exchange once per several micro-batches "
                f"(PyTorch DDP's no_sync; {NO_ACCUMULATION_ON_JAX})",
            )
        )
    if not causes:
        causes.append(
            Cause(
                "unexplained",
                f"{(s.overhead_share or 0):.0%} of each step is outside compute and no single cause stands out",
                "profile one step (TensorBoard profiler, or "
                "nsys profile --trace cuda,nvtx) to see where the time between kernels goes",
            )
        )
    return causes
