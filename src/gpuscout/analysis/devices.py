"""The verdict's findings on a script that could train on several devices: devices left idle, a
per-device batch too small to keep a GPU busy, a host loop that dispatches for every device,
one GPU the others wait for (analysis/verdict.py ranks them with the rest).

Keras users meet these when "multi-GPU gives no speed-up" (keras#20998, keras#19809): the step
is split over N devices, but the input, the host and the batch stay those of one.

- Devices unused: the framework sees more devices than the step ran on. What spreading the
  step could save, at most: the step's computing share (1 - input wait) times the share of the
  devices that sat idle (1 - replicas / devices), as if data parallelism were perfect.
- A per-device batch under SMALL_DEVICE_BATCH with the GPUs starved (< 70% busy, not waiting
  for input): each device computes too little per step for its launch and sync costs.
  64 is a heuristic floor, not a law: below it the matrix products of typical layer sizes leave
  most of an A100's or H100's SMs idle (NVIDIA's "Matrix Multiplication Background" guide: a
  GEMM's tiles must outnumber the SMs); the GPU's busy share is the evidence that decides.
- Uneven GPUs: synchronous data parallelism runs at the slowest replica's pace, so the others
  idle; one GPU busier than another by UNEVEN_BUSY_POINTS or more is named as the straggler.
  With a trace, each GPU's computing time is read apart from its collectives (busy less the
  collectives with nothing beside them): one computing SLOWER_COMPUTE_SHARE longer than the
  others' median is the straggler, and the others' extra time alone in the all-reduce shows it.
  NVML cannot tell this: a GPU waiting in NCCL's kernel counts as busy.
- Collectives waited for (from `watch --trace-steps`, measure/trace_kernels.py): the time a step
  a GPU runs its all-reduce with no other kernel beside it, against the traced step's span, from
  WAITED_SHARE on. NVML counts those kernels as busy; the trace tells them apart.
- Computation slowed beside the collectives (the same trace): what the kernels that ran beside an
  all-reduce took beyond the same kernels' usual time alone, from SLOWED_SHARE of the step on. An
  all-reduce hidden behind the backward pass is not free: it holds SMs and memory bandwidth.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from gpuscout.analysis.scaling import NO_ACCUMULATION_ON_JAX
from gpuscout.record.watch import Cause, TraceDevice, WatchedFit, WatchRecord

SMALL_DEVICE_BATCH = 64
UNEVEN_BUSY_POINTS = 15.0  # percentage points of NVML utilisation between two GPUs of one step
# 5% more computing a step than the others: the same line as a straggler's clocks (flags.py,
# STRAGGLER_CLOCK_SHARE 0.95); the 4 GPUs of docs/benchmarks.md's traces computed within 0.7%
SLOWER_COMPUTE_SHARE = 0.05
# A tenth of the step in exposed collectives: the harness's own data-parallel steps leave 1-9% of the
# step outside computation on two to four H200s (docs/benchmarks.md, "Four GPUs"); past a tenth the
# exchange, not the model, sets the pace
WAITED_SHARE = 0.10
# Two hundredths of the step in computation slowed beside the exchange: the trace of GPT-2 small on four
# H200s read 1.03 ms of 34.0 (3.0%), most of the gap between its 91% and the 98.7% of the same step
# with nothing exchanged; a float32 MLP's read 0.1 ms of 11.1 (docs/benchmarks.md, "GPT-2 small on four
# GPUs with nothing exchanged")
SLOWED_SHARE = 0.02
# The one line that spreads a Keras 3 step over every device (keras.distribution), before the model is built
DATA_PARALLEL_LINE = (
    "keras.distribution.set_distribution(keras.distribution.DataParallel())   # before the model is built"
)
LEARNING_RATE_NOTE = (
    "a global batch N times larger changes training: scale the learning rate with it (the linear "
    "scaling rule, Goyal et al. 2017, with a warm-up) and check the loss"
)


def spread_code(backend: str | None) -> str:
    """The lines that put the step on every device the framework sees."""
    if backend == "tensorflow":
        return (
            "strategy = tf.distribute.MirroredStrategy()   # every GPU this process sees\n"
            "with strategy.scope():\n"
            "    model = build_model()   # build and compile inside the scope\n"
            "    model.compile(...)"
        )
    return DATA_PARALLEL_LINE


def data_parallel_code(backend: str | None, devices: int, batch_size: int | None) -> str:
    """The lines that put the step on every device, with the global batch grown to keep each
    device's share."""
    batch = f"batch_size={batch_size * devices}" if batch_size else f"batch_size=<your batch x {devices}>"
    return f"{spread_code(backend)}\nmodel.fit(..., {batch})   # the global batch: each device computes its share"


def devices_unused(r: WatchRecord, main: WatchedFit) -> Cause | None:
    devices = main.devices or 0
    if devices < 2 or main.replicas >= devices:
        return None
    computing = 1 - min(1.0, r.input_wait_share or 0.0)
    saving = (1 - main.replicas / devices) * computing
    kind = "GPUs" if r.gpu is not None else "devices"
    ran = f"{main.replicas} ({main.strategy})" if main.strategy else f"{main.replicas}"
    wait = (
        ""
        if not r.input_wait_share or r.input_wait_share < 0.05
        else f"; the input must keep up with {devices} times the samples first"
    )
    return Cause(
        code="devices_unused",
        saving_share=saving,
        message=f"{devices - main.replicas} of the {devices} {kind} this process sees sat idle: the step "
        f"ran on {main.replicas}",
        evidence=f"{main.backend} sees {devices} {kind}; the step ran on {ran}{wait}",
        fix=f"train on all {devices} with data parallelism, the global batch {devices} times larger so "
        f"each keeps its share; {LEARNING_RATE_NOTE}. `gpuscout tune` measures what it buys here "
        "(data_parallel)",
        code_snippet=data_parallel_code(main.backend, devices, main.batch_size),
    )


def per_device_batch(main: WatchedFit) -> int | None:
    return main.batch_size // main.replicas if main.batch_size and main.replicas > 1 else None


def small_device_batch(r: WatchRecord, main: WatchedFit, util_pct: float) -> Cause | None:
    """Starved GPUs under data parallelism with a small share of the batch each (the caller has
    checked the starvation: util_pct under the verdict's threshold, no input wait)."""
    each = per_device_batch(main)
    if each is None or each >= SMALL_DEVICE_BATCH:
        return None
    bigger = SMALL_DEVICE_BATCH * main.replicas
    return Cause(
        code="small_device_batch",
        saving_share=r.gpu_idle_share,
        message=f"a per-device batch of {each} ({main.batch_size} over {main.replicas} devices) keeps the "
        f"GPUs {util_pct:.0f}% busy: each computes too little per step",
        evidence=f"global batch {main.batch_size}, {main.replicas} replicas ({main.strategy}); step "
        f"{r.step_time_s * 1000:.1f} ms; GPUs busy {util_pct:.0f}%",
        fix=f"grow the global batch with the devices (at least {bigger}: {SMALL_DEVICE_BATCH} per device); "
        f"{LEARNING_RATE_NOTE}",
        code_snippet=f"model.fit(..., batch_size={bigger})",
    )


def dispatch_note(main: WatchedFit) -> str:
    """What host-bound means on several devices (analysis/verdict.py's host_bound adds it)."""
    if main.replicas < 2:
        return ""
    return (
        f"; on {main.replicas} devices the host dispatches every step for each of them, so one host round "
        "trip per step costs N times the work"
    )


def uneven(r: WatchRecord) -> Cause | None:
    busy = {t.index: t.gpu_util_mean_pct for t in r.telemetry_per_gpu or () if t.gpu_util_mean_pct is not None}
    if len(busy) < 2:
        return None
    slowest = max(busy, key=busy.get)
    idlest = min(busy, key=busy.get)
    gap = busy[slowest] - busy[idlest]
    if gap < UNEVEN_BUSY_POINTS or busy[idlest] < 5:  # a GPU hardly used is not waiting for another
        return None
    others = ", ".join(f"GPU {i} {u:.0f}%" for i, u in sorted(busy.items()) if i != slowest)
    return Cause(
        code="straggler",
        saving_share=gap / 100,
        message=f"GPU {slowest} is the straggler: busy {busy[slowest]:.0f}% while the others waited for it",
        evidence=f"NVML busy share: GPU {slowest} {busy[slowest]:.0f}%, {others}",
        fix=straggler_fix(slowest),
    )


def traced_straggler(r: WatchRecord) -> Cause | None:
    """The GPU the others wait for, from each GPU's kernels in the trace (None without one)."""
    devices = [d for d in (r.trace.devices if r.trace else ()) if d.span_ms > 0]
    if len(devices) < 2:
        return None
    computing = {d.device: d.busy_ms - d.collectives_alone_ms for d in devices}
    slowest = max(devices, key=lambda d: computing[d.device])
    others = sorted(computing[d.device] for d in devices if d is not slowest)
    typical = statistics.median(others)
    excess = computing[slowest.device] - typical
    if typical <= 0 or excess < SLOWER_COMPUTE_SHARE * typical:
        return None
    name = device_name(slowest.device)
    waits = [d.collectives_alone_ms for d in devices if d is not slowest]
    return Cause(
        code="straggler",
        saving_share=min(1.0, excess / slowest.span_ms),
        message=f"{name} is the straggler: it computes {excess:.1f} ms a step longer than the others, "
        "which wait for it in the all-reduce",
        evidence=f"profiler trace of steps {r.trace.first_step}-{r.trace.last_step}, computing a step "
        f"(kernels less collectives alone): {name} {computing[slowest.device]:.1f} ms, the others "
        f"{others[0]:.1f}-{others[-1]:.1f} ms; their collectives alone {min(waits):.1f}-"
        f"{max(waits):.1f} ms against {slowest.collectives_alone_ms:.1f} ms on {name}",
        fix=straggler_fix(name.split()[-1]),
    )


def straggler_fix(index) -> str:
    return (
        "synchronous data parallelism runs at its slowest GPU's pace: check what else runs on "
        f"GPU {index} (`nvidia-smi`), its clocks and cooling (`nvidia-smi -q -d PERFORMANCE -i {index}`), and "
        "that every device gets the same share of the batch"
    )


def device_name(trace_name: str) -> str:
    """ "/device:GPU:0" as "GPU 0"."""
    kind, _, index = trace_name.rpartition(":")
    return f"{kind.rsplit('/', 1)[-1].replace('device:', '')} {index}" if index.isdigit() else trace_name


def worst_traced(r: WatchRecord, main: WatchedFit, figure: Callable[[TraceDevice], float], floor: float):
    """(the trace's GPUs, the one whose `figure` is the largest share of its traced step, that share)
    of a run over several replicas, where that share is `floor` or more; else None (no trace, one
    replica, or below the floor)."""
    devices = [d for d in (r.trace.devices if r.trace else ()) if d.span_ms > 0]
    if main.replicas < 2 or not devices:
        return None
    worst = max(devices, key=lambda d: figure(d) / d.span_ms)
    share = figure(worst) / worst.span_ms
    return (devices, worst, share) if share >= floor else None


def collectives_waited(r: WatchRecord, main: WatchedFit) -> Cause | None:
    found = worst_traced(r, main, lambda d: d.collectives_alone_ms, WAITED_SHARE)
    if found is None:
        return None
    devices, worst, share = found
    return Cause(
        code="collectives_waited",
        saving_share=share,
        message=f"the step waits for its all-reduce: {worst.collectives_alone_ms:.1f} ms of "
        f"{worst.span_ms:.1f} with nothing else running on {device_name(worst.device)}",
        evidence=f"profiler trace of steps {r.trace.first_step}-{r.trace.last_step}: "
        + "; ".join(
            f"{device_name(d.device)} collectives {d.collectives_ms:.1f} ms a step, "
            f"{d.collectives_alone_ms:.1f} ms alone"
            for d in devices[:4]
        ),
        fix=f"{more_samples_per_exchange(main)}; where the step is this short, fewer devices can train "
        "faster (compare with `gpuscout tune`)",
    )


def more_samples_per_exchange(main: WatchedFit) -> str:
    """The change for an exchange that costs the step: the same bytes for more samples."""
    return (
        f"send the same gradients for more samples: a per-device batch larger than "
        f"{per_device_batch(main) or 'this one'} ({LEARNING_RATE_NOTE})"
        + (f"; {NO_ACCUMULATION_ON_JAX}" if main.backend == "jax" else "")
    )


def compute_slowed(r: WatchRecord, main: WatchedFit) -> Cause | None:
    found = worst_traced(r, main, lambda d: d.slowed_beside_collectives_ms, SLOWED_SHARE)
    if found is None:
        return None
    devices, worst, share = found
    return Cause(
        code="compute_slowed_by_collectives",
        saving_share=share,
        message=f"computation runs slower beside the all-reduce: {worst.slowed_beside_collectives_ms:.1f} ms "
        f"a step of {worst.span_ms:.1f} on {device_name(worst.device)}, beyond what the same kernels "
        "take with no collective running",
        evidence=f"profiler trace of steps {r.trace.first_step}-{r.trace.last_step}: "
        + "; ".join(
            f"{device_name(d.device)} {d.slowed_beside_collectives_ms:.1f} ms slower beside "
            f"{d.collectives_ms:.1f} ms of collectives"
            for d in devices[:4]
        ),
        fix="the all-reduce holds SMs and memory bandwidth that the kernels beside it would use (cuBLAS's "
        "GEMMs on Hopper are often sized to one wave over every SM and lose part of it to NCCL's): "
        f"{more_samples_per_exchange(main)}. Fewer NCCL channels (NCCL_MAX_CTAS) slow the exchange more "
        "than they spare the computation (docs/benchmarks.md)",
    )
