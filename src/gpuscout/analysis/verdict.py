"""The verdict on a watched script (`WatchRecord`, analysis/watch.py derives it): what slowed
its training, each cause with the evidence measured and the change to make.

Causes are ranked by the share of the training time each could save. Thresholds: input-bound
from 5% of the time blocked on the next batch (the TensorFlow profiler's input-pipeline
analyser: < 5% not, 5-20% moderately, > 20% highly input-bound), unless each batch arrives
within HANDOVER_S, or a slice of in-memory arrays arrives slower than a gather of its bytes (then
it was ready: the steps are too short for the handover, and the pipeline is not the problem);
what waiting costs is bounded by the GPU's idle share, as the device computes the previous step
meanwhile. A GPU counts as starved below 70% mean utilisation (NVML's utilisation is the share of
time a kernel ran, so a GPU-bound run sits near 100%); memory counts as unused below half of the
GPU's.
"""

from __future__ import annotations

import math

from gpuscout.analysis import devices, divergence, epoch_causes, repeats, untimed
from gpuscout.analysis import flags as flagging
from gpuscout.analysis.device_causes import gpu_health, mixed_precision, unused_memory, xla_off
from gpuscout.analysis.input_fixes import input_fix
from gpuscout.record.watch import Cause, WatchedFit, WatchRecord

INPUT_BOUND_SHARE = flagging.INPUT_BOUND_MODERATE  # 5%
INPUT_HIGHLY = flagging.INPUT_BOUND_HIGH  # 20%
STARVED_UTIL_PCT = untimed.STARVED_UTIL_PCT
# A batch that arrives within this was ready: its cost is the handover, not a slow pipeline
# (a prefetched tf.data get_next from Python takes 0.1-0.3 ms on the CI's CPU, measured with
# tests/fixtures/watch/train.py; a Python generator's per-batch work is milliseconds).
HANDOVER_S = 0.001
# In-memory arrays that Keras slices itself are gathered a batch at a time: a copy of the batch's
# bytes (a 64-row numpy gather of 3 MB batches ran at 6.9 GB/s on one core of the CI's CPU,
# 2026-11-27). A batch whose bytes arrived slower than this floor was not waiting on the gather but
# on the per-batch handover, which a CPU shared with other work stretches past HANDOVER_S (a cached
# 8 KB batch's 0.35 ms became 1.1-1.3 ms beside two busy processes on the CI's two cores).
GATHER_FLOOR_BYTES_PER_S = 1e9
IN_MEMORY = ("numpy", "jax array")
OUTSIDE_STEP_SHARE = 0.10  # the loop's own work between steps worth naming
# A loop that waits for its input can still be host-bound beyond the wait: where the GPU idles this
# share of the time more than the wait explains (gpuscout's threshold: a quarter of the run, so that
# NVML's sampled busy share cannot tip it), the host's own work is named too. Seen on two H200s: a
# DataParallel MLP of 2.5 ms steps, GPU idle 98%, input wait 18% (docs/benchmarks.md, 2026-11-27).
HOST_BEYOND_WAIT_SHARE = 0.25


def verdict(
    r: WatchRecord, other_pids: list[int] = (), precision_reference: tuple[float, str] | None = None
) -> list[Cause]:
    """Ranked by the share of the training time each could save (None last). `other_pids`: other
    processes on its GPUs; `precision_reference`: mixed precision's speed-up measured on this GPU
    kind and what it was measured on."""
    main = max(r.fits, key=lambda f: f.steps, default=None)
    # a loss that went NaN comes first: every speed figure is then of steps that learn nothing
    diverged = [c for c in [divergence.cause(next((f for f in (main, *r.fits) if f and f.diverged), None))] if c]
    return diverged + _speed(r, main, other_pids, precision_reference)


def _speed(
    r: WatchRecord, main: WatchedFit | None, other_pids: list[int], precision_reference: tuple[float, str] | None
) -> list[Cause]:
    if r.status == "failed" and (main is None or not r.windows):
        return [untimed.failed(r), *gpu_health(r, other_pids)]
    if main is None or not r.windows:
        return [
            untimed.no_steps(r),
            *[c for c in (untimed.gpu_idle(r), unused_memory(r, None)) if c],
            *gpu_health(r, other_pids),
        ]
    causes = [
        c
        for c in (
            _input_bound(r, main),
            _host_bound(r, main),
            _callbacks(r, main),
            epoch_causes.outside_steps(r, main),
            mixed_precision(r, main, precision_reference),
            xla_off(r, main),
            unused_memory(r, main),
            devices.devices_unused(r, main),
            devices.collectives_waited(r, main),
            devices.compute_slowed(r, main),
            *gpu_health(r, other_pids),
        )
        if c
    ]
    if not causes:
        causes.append(_compute_bound(r))
    return sorted(causes, key=lambda c: -(c.saving_share if c.saving_share is not None else -1))


def _compute_bound(r: WatchRecord) -> Cause:
    """No stall found: the device's computation is the limit."""
    evidence = f"{_wait_text(r)}; step {r.step_time_s * 1000:.1f} ms"
    if r.gpu is None:
        return Cause(
            code="compute_bound",
            saving_share=None,
            evidence=evidence,
            message="no input or host stall found; the steps ran on the CPU (no GPU was used)",
            fix="train on a GPU: `gpuscout doctor` says whether this machine's framework sees one",
        )
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    where = f"GPU-bound at {util:.0f}% utilisation" if util is not None else "no input or host stall found"
    return Cause(
        code="gpu_bound",
        saving_share=None,
        evidence=evidence,
        message=f"{where}{f', MFU {r.mfu:.1%}' if r.mfu is not None else ''}",
        fix="the GPU is the limit: a faster GPU, fewer FLOPs per sample, or `gpuscout tune` for what "
        "this GPU buys with each setting",
    )


def _wait_text(r: WatchRecord) -> str:
    wait = (
        "input wait not measured"
        if r.input_wait_share is None
        else f"{r.input_wait_share:.1%} of the time blocked on the next batch"
    )
    idle = "" if r.gpu_idle_share is None else f", GPU idle {r.gpu_idle_share:.0%}"
    return wait + idle


def _input_bound(r: WatchRecord, main: WatchedFit) -> Cause | None:
    share = r.input_wait_share
    if share is None or share < INPUT_BOUND_SHARE:
        return None
    band = "highly" if share > INPUT_HIGHLY else "moderately"
    steps = sum(w.steps for w in r.steady)
    fetch_s = sum(w.input_wait_s or 0 for w in r.steady) / steps
    compute_s = max(r.step_time_s - fetch_s, 1e-9)
    # producers a batch each in parallel that keep up with the step (rounded: 16/4 must be 4, not 5)
    cores = math.ceil(round(fetch_s / compute_s, 6)) if fetch_s > compute_s else None
    # The device computes the previous step while the loop waits: it can save no more than the
    # time the GPU sat idle (the whole wait where there is no GPU telemetry)
    saving = share if r.gpu_idle_share is None else min(share, r.gpu_idle_share)
    if _handed_over(main, fetch_s):
        return _handover(r, main, saving, fetch_s, compute_s)
    keep = repeats.keepable(main, r.env.host_memory_bytes)
    if isinstance(keep, repeats.Keepable):  # the work can be done once: before more producers for it
        fix, snippet = f"make each batch once and keep it: {keep.evidence}", repeats.cache_code(keep)
    else:
        fix, snippet = input_fix(main, cores)
    feeds = (
        ""
        if main.replicas < 2
        else f"; one host input feeds {main.replicas} devices, {main.replicas} times the samples of one device's step"
    )
    return Cause(
        code="input_bound",
        saving_share=saving,
        message=f"{band} input-bound: {share:.0%} of the training time waiting for the next batch{feeds}",
        evidence=f"{_wait_text(r)}; a batch took {fetch_s * 1000:.1f} ms to arrive against "
        f"{compute_s * 1000:.1f} ms of the rest of a step (input: {main.input_type})"
        + (f"; about {cores} producers in parallel would keep up" if cores else "")
        + (f" (this host has {r.env.cpu_count} cores)" if cores and r.env.cpu_count else ""),
        fix=fix,
        code_snippet=snippet,
    )


def _handed_over(main: WatchedFit, fetch_s: float) -> bool:
    """Whether the batches were ready and the wait was their handover: they arrived within
    HANDOVER_S, or they are slices of in-memory arrays whose bytes came slower than a gather."""
    if fetch_s < HANDOVER_S:
        return True
    return (
        main.input_type in IN_MEMORY
        and main.batch_bytes is not None
        and main.batch_bytes / fetch_s < GATHER_FLOOR_BYTES_PER_S
    )


def _handover(r: WatchRecord, main: WatchedFit, saving: float, fetch_s: float, compute_s: float) -> Cause:
    """Batches that arrive in well under a millisecond are ready: what the loop pays is the
    handing over of each (a tf.data iterator's get_next from Python, a conversion), against
    steps so short that it shows. Fewer, larger steps help; a faster pipeline would not."""
    changes = [f"a larger batch than {main.batch_size}" if main.batch_size else "a larger batch"]
    if (main.steps_per_execution or 1) == 1 and not main.custom:
        changes.append(
            "model.compile(..., steps_per_execution=32) (Keras then reads the input inside its compiled loop)"
        )
    return Cause(
        code="input_handover",
        saving_share=saving,
        message=f"{r.input_wait_share:.0%} of the training time goes to handing over batches that are ready: "
        f"the steps are short, not the pipeline slow",
        evidence=f"{_wait_text(r)}; {fetch_s * 1000:.2f} ms per batch against {compute_s * 1000:.1f} ms "
        f"of the rest of a step (input: {main.input_type})",
        fix="fewer, larger steps: " + "; ".join(changes),
    )


def _callbacks(r: WatchRecord, main: WatchedFit) -> Cause | None:
    """Host time in the user's callbacks (a ModelCheckpoint's save each epoch, a logger's work
    each batch), named, when together they take OUTSIDE_STEP_SHARE of the epochs (the steady
    ones, by the user's clock, where it has them). Where the epoch's end holds that time, the
    finding of the epoch's parts names the callback already (epoch_causes.outside_steps)."""
    steady = {e.epoch for e in r.clock.steady} if r.clock else None
    epochs = [e for e in main.epochs if e.callbacks_s and (steady is None or e.epoch in steady)]
    if not epochs:
        return None
    spent = sum(e.epoch_end_monotonic_s - e.start_monotonic_s for e in epochs)
    parts = epoch_causes.parts(r.clock)
    at_end = parts.end_s + parts.between_s if parts else 0.0
    if parts and parts.share(parts.outside_s) >= epoch_causes.EPOCH_OUTSIDE_SHARE:
        if sum(s for e in epochs for s in e.callbacks_s.values()) <= 1.1 * at_end:
            return None
    per_callback = {}
    for e in epochs:
        for name, seconds in e.callbacks_s.items():
            per_callback[name] = per_callback.get(name, 0.0) + seconds
    total = sum(per_callback.values())
    if spent <= 0 or total / spent < OUTSIDE_STEP_SHARE:
        return None
    named = ", ".join(
        f"{name}: {fmt_seconds(seconds / len(epochs))} per epoch"
        for name, seconds in sorted(per_callback.items(), key=lambda item: -item[1])
        if seconds / len(epochs) >= 1e-3
    )  # a callback under a millisecond is not the cost
    return Cause(
        code="callbacks",
        saving_share=total / spent,
        message=f"callbacks take {total / spent:.0%} of each epoch on the host",
        evidence=f"{named} (over {len(epochs)} epoch(s))",
        fix="lighten them: save checkpoints less often (ModelCheckpoint(save_freq=...)), log every N batches "
        "instead of each, and keep per-batch callbacks async_safe",
    )


def fmt_seconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _host_bound(r: WatchRecord, main: WatchedFit) -> Cause | None:
    """The GPU idles, and not because the loop waits for input (or far more than that wait
    explains): the host launches steps too slowly (small steps, the loop's own work, Python
    between steps)."""
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    wait = r.input_wait_share or 0
    waiting = wait >= INPUT_BOUND_SHARE
    beyond = (r.gpu_idle_share or 0) - wait  # the GPU's idle time the input wait does not explain
    if util is None or util >= STARVED_UTIL_PCT or (waiting and beyond < HOST_BEYOND_WAIT_SHARE):
        return None
    small = devices.small_device_batch(r, main, util)
    if small is not None:  # several devices, each with a sliver of the batch: that first
        return small
    if main.custom:
        changes = [
            "compile the whole step (jax.jit, or tf.function(jit_compile=True))",
            "no host round trip inside the step (.numpy(), .item(), float(loss) each step)",
            "a larger batch",
        ]
        snippet = None
    else:
        changes = [
            c
            for c, wanted in (
                ("model.compile(..., jit_compile=True)", not main.jit_compile),
                ("model.compile(..., steps_per_execution=32)", (main.steps_per_execution or 1) == 1),
            )
            if wanted
        ]
        snippet = "\n".join(changes) or None
        if main.batch_size:
            changes.append(f"a larger batch than {main.batch_size}")
    outside = r.outside_step_share
    between = "" if outside is None else f"; {outside:.0%} of the time between steps (callbacks, the loop)"
    data = (
        f"waiting for data explains {wait:.0%} of the time, the host's own work most of the rest"
        if waiting
        else "the loop did not wait for data"
    )
    return Cause(
        code="host_bound",
        saving_share=beyond if waiting else r.gpu_idle_share,
        message=f"host-bound: the GPU ran kernels {util:.0f}% of the time, and {data}{devices.dispatch_note(main)}",
        evidence=f"step {r.step_time_s * 1000:.1f} ms{between}; {_wait_text(r)}",
        fix="give the GPU more work per host round trip: "
        + "; ".join(changes)
        + ("; and lighten the callbacks" if (outside or 0) >= OUTSIDE_STEP_SHARE else ""),
        code_snippet=snippet,
    )
