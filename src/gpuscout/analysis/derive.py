"""Every figure of a stored record, derived from a child's result in one place.

bench, tune, scale, sweep trials, inference and the multi-worker merge all hand a RunSpec, the
child's outcome and what the parent knows besides (the GPUs, telemetry, other processes, the
price) to `derive`, which returns the records: one per run, or one per batch size for inference.
Throughput statistics, step and epoch time, achieved TFLOP/s and MFU, telemetry summaries, flags
and cost are computed here and nowhere else (docs/methodology.md says what each one means).
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from gpuscout import catalog, workloads
from gpuscout.analysis import flags as flagging
from gpuscout.analysis.latency import summarize_latency
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout.analysis.stats import summarize
from gpuscout.analysis.telemetry import combine_telemetry
from gpuscout.catalog.pricing import PricingOptions, cost_figures, hourly_cost
from gpuscout.core.provenance import relevant_env, utc_now
from gpuscout.core.spec import DataMode, RunSpec, Task
from gpuscout.core.spec import Distribution as DistributionKind
from gpuscout.core.units import counted
from gpuscout.core.versions import METHODOLOGY_VERSION, __version__
from gpuscout.record.child import ChildOutcome, ChildResult, ChildWindow, FrameworkInfo, InferencePoint
from gpuscout.record.run import (
    SCHEMA_VERSION,
    Cost,
    Distribution,
    Environment,
    ErrorDetail,
    Flag,
    GpuInfo,
    Inference,
    Latency,
    LoadTest,
    RunRecord,
    Telemetry,
    Throughput,
    Window,
)
from gpuscout.workloads import sizing
from gpuscout.workloads.base import Workload

# (the run's windows, samples measured in them) -> one telemetry summary per GPU, in the run's GPU order
TelemetryOver = Callable[[list[ChildWindow], int], list[Telemetry]]


@dataclass
class RunContext:
    """What the parent knows of a run besides the child's result."""

    gpus: list[GpuInfo]  # the run's GPUs as NVML described them; empty on the CPU
    environment: dict  # host provenance (provenance.host_provenance)
    child_env: dict[str, str]
    group_id: str
    repeat_index: int = 0
    telemetry: TelemetryOver | None = None
    other_pids: list[int] = field(default_factory=list)  # other compute processes on the run's GPUs
    pricing: PricingOptions = field(default_factory=PricingOptions)
    # A merged multi-worker run: its whole batch and device count, and what the workers' records
    # found that nothing here can see again (other processes on their GPUs).
    totals: tuple[int, int] | None = None
    inherited_flags: list[Flag] = field(default_factory=list)


def derive(spec: RunSpec, outcome: ChildOutcome, ctx: RunContext) -> list[RunRecord]:
    """The records of one run: one, or for inference one per batch size."""
    result = outcome.result
    if spec.task is Task.infer and result is not None and result.inference is not None:
        return [
            _record(spec.model_copy(update={"batch_size": p.batch_size}), outcome, ctx, p)
            for p in result.inference.points
        ]
    return [_record(spec, outcome, ctx, None)]


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def _record(spec: RunSpec, outcome: ChildOutcome, ctx: RunContext, point: InferencePoint | None) -> RunRecord:
    workload = workloads.for_spec(spec)
    batch_size, devices = ctx.totals or (spec.batch_size, spec.devices)
    result = outcome.result
    served_on_cpu = result is not None and result.inference is not None and result.inference.server.device == "cpu"
    gpu = ctx.gpus[0] if ctx.gpus else None
    entry = catalog.match(gpu.name) if gpu is not None else None
    flags: list[Flag] = [f for f in [flagging.shared_flag(ctx.other_pids)] if f] + list(ctx.inherited_flags)
    record = {
        "id": new_id(),
        "created_utc": utc_now(),
        "group_id": ctx.group_id,
        "repeat_index": ctx.repeat_index,
        "workload": spec.workload,
        "backend": spec.backend,
        "precision": spec.precision,
        "xla": spec.xla,
        "mode": "inference" if spec.task is Task.infer else "training",
        "batch_size": batch_size,
        "devices": devices,
        "per_device_batch_size": batch_size // devices,
        "seq_len": spec.seq_len,
        "data": spec.data,
        "device": "cpu" if served_on_cpu else spec.device_kind,
        "status": outcome.status,
        "duration_s": outcome.duration_s,
        "error": None
        if outcome.status == "ok"
        else ErrorDetail(message=outcome.message, stderr_tail=outcome.stderr_tail, returncode=outcome.returncode),
        "unit": f"{workload.unit}/s",
        "units_per_sample": workload.units_per_sample(spec.seq_len),
        "training_flops_per_sample": None
        if spec.task is Task.infer
        else workload.training_flops_per_sample(spec.seq_len),
        "estimated_peak_memory_bytes": sizing.estimate_bytes(
            workload, spec.per_device_batch_size, spec.precision, spec.seq_len
        ),  # per device: what must fit on each
        "gpu": None if gpu is None else gpu.model_copy(update={"catalog_id": entry.id if entry else None}),
        "gpus": list(ctx.gpus) if len(ctx.gpus) > 1 else None,
        "distribution": _distribution(spec, result),
        "inference": _inference(spec, result, point, workload),
        "spec": spec,
        "env": Environment(
            **ctx.environment,
            child_env=relevant_env(ctx.child_env),
            framework=result.framework if result else _started_framework(outcome.events),
            compiled=result.compiled if result else None,
        ),
        "gpuscout_version": __version__,
        "methodology_version": METHODOLOGY_VERSION,
        "schema_version": SCHEMA_VERSION,
    }
    if record["error"] is not None:
        record["error"] = _explained(record["error"], spec, record["env"], record["gpu"])
    if result is None:  # a run that did not finish keeps what it got to: its compile time
        record["compile_s"] = next((e.get("compile_s") for e in outcome.events if e.get("event") == "compiled"), None)
    if result is not None:
        record.update(
            _measurements(spec, result, point, workload, None if served_on_cpu else entry, batch_size, devices, flags)
        )
        record.update(_time_to_accuracy(spec, result, outcome))
        record.update(_telemetry(record, ctx, gpu, flags))
    if entry is not None and not served_on_cpu and record.get("throughput") is not None:
        record["cost"] = _cost(record, entry, ctx.pricing, devices if spec.device_kind == "gpu" else 1)
    record["flags"] = flags
    return RunRecord(**record)


def _explained(error: ErrorDetail, spec: RunSpec, env: Environment, gpu: GpuInfo | None) -> ErrorDetail:
    """The error with the known failures in its message and output, fixes for the run's machine
    (its record's driver, framework build and GPU) and the run's workload, batch and precision."""
    from gpuscout.explain import Context, Machine, explained

    known = spec.workload in workloads.names()
    context = Context(
        workload=spec.workload if known else None,
        batch_size=spec.per_device_batch_size,
        precision=spec.precision.value,
        seq_len=spec.seq_len,
        framework=spec.backend.value,
    )
    return explained(error, Machine.from_record(env, gpu, env.framework), context)


def _started_framework(events: list[dict]):
    """The versions the child reported as it started (the worker's "started" event): a run that
    timed out or failed still says which Keras and backend it ran."""
    started = next((e for e in events if e.get("event") == "started" and e.get("framework")), None)
    if started is None:
        return None
    try:
        return FrameworkInfo.model_validate(started["framework"])
    except ValidationError:
        return None


def _distribution(spec: RunSpec, result: ChildResult | None) -> Distribution | None:
    if spec.distribution is DistributionKind.single:
        return None
    details = result.distribution.model_dump() if result is not None and result.distribution else {}
    return Distribution(kind=spec.distribution.value, **details)


def _inference(
    spec: RunSpec, result: ChildResult | None, point: InferencePoint | None, workload: Workload
) -> Inference | None:
    if spec.task is not Task.infer:
        return None
    part = Inference(format=spec.inference.format.value, variant=spec.inference.variant)
    if point is None:  # the child failed: no batch size was measured
        return part
    inf = result.inference
    load = inf.load if inf.load is not None and inf.load.batch_size == point.batch_size else None
    return part.model_copy(
        update={
            "flops_per_sample": workload.forward_flops(spec.seq_len),
            "latency": Latency(**summarize_latency(point.latencies_s)),
            "load_test": None
            if load is None
            else LoadTest(
                clients=load.clients,
                batch_size=load.batch_size,
                seconds=load.seconds,
                requests=load.requests,
                samples_per_s=load.samples_per_s,
                thread_safe=load.thread_safe,
                latency=Latency(**summarize_latency(load.latencies_s)),
            ),
            "input_path": point.input_path,
            "serving": inf.server,
            "agreement": inf.agreement,
            "trained_on": inf.trained,
        }
    )


def _measurements(
    spec: RunSpec,
    result: ChildResult,
    point: InferencePoint | None,
    workload: Workload,
    entry,
    batch_size: int,
    devices: int,
    flags: list[Flag],
) -> dict:
    """Throughput and what follows from it, over the timing windows."""
    child_windows = point.windows if point is not None else result.windows
    measured = {
        "compile_s": point.first_request_s if point else result.compile_s,
        "warmup_s": None if point else result.warmup_s,
        "steps_per_window": child_windows[0].steps if point else result.steps_per_window,
        "loss": None if point else result.loss,
        "fixed_step_loss": None if point else result.fixed_step_loss,
        "fixed_steps": None if point else result.fixed_steps,
        "peak_memory_bytes": result.peak_memory_bytes,
        "host_peak_rss_bytes": result.host_peak_rss_bytes,
        "compilation_cache": result.compilation_cache,
    }
    if not child_windows:
        return measured
    units = workload.units_per_sample(spec.seq_len)  # tokens per sequence, or 1
    windows = [
        Window(**w.model_dump(), seconds=w.duration_s, throughput=w.samples * units / w.duration_s)
        for w in child_windows
    ]
    throughputs = [w.throughput for w in windows]
    summary = summarize(throughputs)
    samples_per_s = summary.median / units
    flops = workload.forward_flops(spec.seq_len) if point else workload.training_flops_per_sample(spec.seq_len)
    achieved = achieved_tflops(flops, samples_per_s)
    utilisation, peak, path = mfu(achieved, entry, spec.precision)
    if peak is not None and spec.device_kind == "gpu" and devices > 1:  # the peak of all the run's GPUs
        utilisation, peak = utilisation / devices, peak * devices
    measured_s = sum(w.seconds for w in windows)
    wait_share = sum(w.input_wait_s for w in windows) / measured_s if spec.data is not DataMode.synthetic else None
    flags.extend(flagging.variance_flags(throughputs, summary.cv))
    flags.extend(f for f in (flagging.input_flag(wait_share), flagging.loss_flag(measured["loss"])) if f)
    reference = workload.reference_dataset_size
    return {
        **measured,
        "windows": windows,
        "throughput": Throughput(**summary.to_dict(), unit=f"{workload.unit}/s"),
        "samples_per_s": samples_per_s,
        "step_time_s": batch_size / samples_per_s,
        "epoch_time_s": reference / summary.median if reference and point is None else None,
        "input_wait_share": wait_share,
        "achieved_tflops": achieved,
        "mfu": utilisation,
        "mfu_peak_tflops": peak,
        "mfu_peak_path": path,
    }


def _time_to_accuracy(spec: RunSpec, result: ChildResult, outcome: ChildOutcome) -> dict:
    tta = result.time_to_accuracy
    if tta is None:
        return {}
    curve = tta.curve
    # an epoch of the real dataset, without the first (it holds the compilation)
    out = {"time_to_accuracy": tta, "epoch_time_s": statistics.median(p.train_s for p in (curve[1:] or curve))}
    if not tta.reached:
        out["status"] = "not_reached"
        out["error"] = ErrorDetail(
            message=f"validation accuracy {tta.best_val_accuracy:.4f} after {counted(tta.epochs, 'epoch')}, "
            f"target {spec.to_accuracy.target}",
            stderr_tail="",
            returncode=outcome.returncode if outcome.returncode is not None else 0,
        )
    return out


def _telemetry(record: dict, ctx: RunContext, gpu: GpuInfo | None, flags: list[Flag]) -> dict:
    windows = record.get("windows") or []
    per_gpu = ctx.telemetry(windows, sum(w.samples for w in windows)) if ctx.telemetry and windows else []
    if not per_gpu:
        return {}
    telemetry = per_gpu[0] if len(per_gpu) == 1 else combine_telemetry(per_gpu)
    if len(per_gpu) > 1:
        flags.extend(f for f in [flagging.straggler_flag(per_gpu)] if f)
    throttled = flagging.throttle_flag(
        telemetry.slowdown_reasons, telemetry.sm_clock_mean_mhz, gpu.sm_clock_max_mhz if gpu else None
    )
    flags.extend(f for f in [throttled] if f)
    return {
        "telemetry": telemetry,
        "telemetry_per_gpu": per_gpu if len(per_gpu) > 1 else None,
        "nvml_peak_memory_bytes": telemetry.memory_used_max_bytes,
    }


def _cost(record: dict, entry, pricing: PricingOptions, gpus: int) -> Cost | None:
    """Cost figures at the GPU's hourly cost (docs/catalog.md); none when no price is known."""
    power = record["telemetry"].power_mean_w if record.get("telemetry") else None
    hourly = hourly_cost(catalog.load(), entry.id, pricing, power / gpus if power is not None else None)
    if hourly is None:
        return None
    if gpus > 1:  # prices are per GPU-hour; the run holds all of its GPUs
        hourly = hourly.model_copy(
            update={"usd_per_hour": hourly.usd_per_hour * gpus, "basis": f"{gpus} GPUs x ({hourly.basis})"}
        )
    tta = record.get("time_to_accuracy")
    return cost_figures(
        hourly, record["throughput"].median, record.get("epoch_time_s"), tta.seconds if tta else None, power
    )
