"""A stored run (a watched script, a tune variant, a benchmark) read as what it measured on its GPU:
its pace, and its time split between the GPU, the input and the host (recommend/measured.py)."""

from __future__ import annotations

import statistics

from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.catalog import match as catalog_match
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision
from gpuscout.core.units import counted
from gpuscout.recommend.measured import MeasuredRun, Split
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord
from gpuscout.record.watch import WatchRecord

POLICY_PRECISION = {"mixed_bfloat16": Precision.mixed_bfloat16, "mixed_float16": Precision.mixed_float16}


def measured_run(record: StoredRecord, catalog: Catalog) -> MeasuredRun:
    """What the record measured; UsageError where it measured nothing to recommend from."""
    if isinstance(record, WatchRecord):
        return _from_watch(record, catalog)
    return _from_bench(record, catalog)


def _gpu(name: str | None, catalog_id: str | None, catalog: Catalog) -> GpuSpec | None:
    if catalog_id:
        try:
            return catalog.get(catalog_id)
        except UsageError:
            pass
    return catalog_match(name, catalog) if name else None


def _split(gpu_util_pct: float | None, input_share: float | None, outside_share: float | None, on_gpu: bool) -> Split:
    input_share = min(1.0, max(0.0, input_share or 0.0))
    outside = min(1.0 - input_share, max(0.0, outside_share or 0.0))
    in_step = 1.0 - input_share - outside
    if on_gpu and gpu_util_pct is not None:
        busy = min(in_step, gpu_util_pct / 100)
        return Split(
            busy,
            input_share,
            1.0 - busy - input_share,
            "GPU busy from NVML utilisation over the steady windows, input wait and host time from the step timing",
        )
    if on_gpu:
        return Split(
            in_step,
            input_share,
            outside,
            "no NVML utilisation: the step's time not spent waiting "
            "for input or between steps taken as the GPU's (an upper bound)",
        )
    return Split(
        in_step,
        input_share,
        outside,
        "measured on the CPU: the step's compute is predicted from "
        "its FLOPs; input wait and time between steps kept as this host's",
    )


def _from_watch(r: WatchRecord, catalog: Catalog) -> MeasuredRun:
    main = r.main
    if not r.ok and not r.steady:
        why = r.error.message if r.error and r.error.message else f"it ended {r.status}"
        raise UsageError(f"run {r.id} did not train ({why}): nothing to recommend from; watch it again once it runs")
    gpu = _gpu(r.gpu.name if r.gpu else None, r.gpu.catalog_id if r.gpu else None, catalog)
    devices = len(r.gpus) if r.gpus else (1 if r.gpu else 0)
    if main is not None and main.replicas > 1:  # the step's own count (a CPU split into devices has no GPUs)
        devices = main.replicas
    timed = bool(r.steady and r.windows_samples_per_s)
    if main is not None and main.steps and not r.steady:
        raise UsageError(
            f"run {r.id} stopped before its first timing window ({counted(main.steps, 'step')}): nothing was timed; "
            "watch it with more --steps"
        )
    spread = r.window_rates()
    flops = 3 * main.forward_flops_per_sample if main and main.forward_flops_per_sample else None
    overhead = [e.epoch_end_monotonic_s - e.end_monotonic_s for e in (main.epochs if main else [])]
    clock = r.clock
    timed_validation = clock is not None and all(e.validation_s is not None for e in clock.steady)
    if timed_validation:  # each epoch's validation scales with the GPU; its end and what comes between do not
        validation = statistics.median(e.validation_s for e in clock.steady)
        host = statistics.median(e.after_s - e.validation_s + e.between_s for e in clock.steady)
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    span = r.windows[-1].end_monotonic_s - r.windows[0].start_monotonic_s if r.windows else 0.0
    startup = max(0.0, r.duration_s - span - sum(overhead))
    return MeasuredRun(
        run_id=r.id,
        record_kind="watch",
        gpu=gpu,
        device_label=r.gpu_label,
        devices=max(1, devices),
        samples_per_s=r.windows_samples_per_s if timed else None,
        samples_per_s_low=min(spread) if timed and spread else r.windows_samples_per_s,
        samples_per_s_high=max(spread) if timed and spread else r.windows_samples_per_s,
        split=_split(util, r.input_wait_share, r.outside_step_share, r.gpu is not None) if timed else None,
        training_flops_per_sample=flops,
        command=list(r.command),
        script=r.workload,
        epoch_overhead_s=validation if timed_validation else statistics.median(overhead) if overhead else 0.0,
        epoch_host_s=host if timed_validation else 0.0,
        startup_s=startup if timed else 0.0,
        tune_change=r.tune_change,
        compile_s=(main.compile_s or 0.0) if main and timed else 0.0,
        backend=main.backend if main else None,
        ended=_ended(r, main.steps if main else 0),
    )


def _ended(r: WatchRecord, steps: int) -> str | None:
    """What a run that did not end as it should says about the prediction made from it."""
    if r.ok:
        return None
    how = {"failed": "failed", "interrupted": f"was interrupted ({r.interrupted_by or 'Ctrl-C'})"}.get(
        r.status, r.status
    )
    why = f": {r.error.message}" if r.error and r.error.message else ""
    return (
        f"run {r.id} {how} after {steps:,} training steps{why}; the prediction is from the steps it timed "
        "before that, and the training as a whole has not been seen to finish"
    )


def _from_bench(r: RunRecord, catalog: Catalog) -> MeasuredRun:
    if not r.ok or not r.samples_per_s:
        why = r.error.message if r.error and r.error.message else f"it ended {r.status}"
        raise UsageError(f"run {r.id} has no throughput ({why}): nothing to recommend from")
    if r.mode != "training":
        raise UsageError(
            f"run {r.id} measured inference: recommend --from takes a training run "
            f"(recommend --workload {r.workload} --scenario infer ranks serving)"
        )
    gpu = _gpu(r.gpu.name if r.gpu else None, r.gpu.catalog_id if r.gpu else None, catalog)
    spread = r.window_rates()
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    return MeasuredRun(
        run_id=r.id,
        record_kind="benchmark",
        gpu=gpu,
        device_label=r.gpu_label,
        devices=r.devices,
        samples_per_s=r.samples_per_s,
        samples_per_s_low=min(spread, default=r.samples_per_s),
        samples_per_s_high=max(spread, default=r.samples_per_s),
        split=_split(util, r.input_wait_share, None, r.device == "gpu"),
        training_flops_per_sample=r.training_flops_per_sample,
        startup_s=max(0.0, r.duration_s - sum(w.seconds for w in r.windows)),
        compile_s=r.compile_s or 0.0,
        backend=r.backend.value,
    )


def precision_of(record: StoredRecord) -> Precision:
    if isinstance(record, RunRecord):
        return record.precision
    main = record.main
    return POLICY_PRECISION.get(main.precision_policy if main else None, Precision.fp32)
