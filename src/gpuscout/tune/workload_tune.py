"""`tune --workload`: the runs of an ablation, a batch search and an input analysis of a standard
workload planned and made, and what they say put together (the package's docstring says how)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.core.provenance import utc_now
from gpuscout.core.spec import Backend, Precision, Protocol
from gpuscout.measure import engine, plans, rules
from gpuscout.measure.request import RunRequest
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.tune.ablation import ablation
from gpuscout.tune.advice import recommendations
from gpuscout.tune.batch import batch_search
from gpuscout.tune.input import input_analysis
from gpuscout.tune.session import Session, has_tensorflow
from gpuscout.tune.workload_results import WorkloadTuneReport
from gpuscout.workloads.user import check_source

PARTS = ("ablation", "batch", "input")
# tune makes a dozen runs or more: a shorter protocol than bench's, per run.
TUNE_PROTOCOL = Protocol(warmup_steps=5, windows=3, window_steps=5, window_seconds=1.0)


# `tune WORKLOAD`'s session when no --budget-minutes is given
WORKLOAD_BUDGET_S = 30 * 60


@dataclass
class TuneOptions(RunRequest):
    """What `gpuscout tune --workload` was asked (the run's common part: measure/request.py; the
    precision and XLA are what the ablation varies, so a user does not set them)."""

    protocol: Protocol = TUNE_PROTOCOL
    fit_check: bool = False  # the batch search finds what fits by running it
    parts: tuple[str, ...] = PARTS
    budget_s: float = WORKLOAD_BUDGET_S
    device: rules.DeviceChoice = field(default_factory=rules.DeviceChoice)
    max_batch: int | None = None
    pipeline: str | None = None  # the user's file.py:make_dataset
    pipeline_cost: int = 1
    model: str | None = None


def tune(
    workload: str | None,
    options: TuneOptions,
    nvml: Nvml,
    store: Store,
    progress: engine.Progress | None = None,
    planned: tuple | None = None,
) -> WorkloadTuneReport:
    """Plan (everything checked first; `planned`: plan()'s answer when the caller checked first),
    then the parts asked for, then what to change."""
    progress = progress or engine.Progress()
    base, notice, notes, precisions = planned or plan(workload, options, nvml)
    if notice:
        progress.note(notice)
    session = Session(options, engine.Session(nvml, options.measure), store, progress, base)
    # The user's pipeline runs first, alone on the CPU: a mistake in it is bad input (exit 2)
    # before any measurement, not a failure after half a tuning session.
    user_pipeline = (
        session.pipeline_alone("your pipeline alone", user_pipeline=options.pipeline)
        if options.pipeline and "input" in options.parts
        else None
    )
    report = WorkloadTuneReport(
        session=session.id,
        created_utc=utc_now(),
        workload=base.workload,
        backend=base.backend.value,
        device=base.device_kind,
        gpu=nvml.gpu(base.gpu_index).name if base.gpu_index is not None else None,
        default_batch_size=base.batch_size,
        budget_s=options.budget_s,
        notes=notes,
    )
    best_precision, use_xla, runs = Precision.fp32, base.backend is Backend.jax, {}
    if "ablation" in options.parts:
        report.ablation, runs = ablation(session, precisions)
        best_precision, use_xla = Precision(report.ablation.best.precision), report.ablation.best.xla
    if "batch" in options.parts:
        report.batch = batch_search(session, best_precision, use_xla)
    if "input" in options.parts:
        report.input = input_analysis(session, best_precision, use_xla, runs, user_pipeline)
    report.recommendations = recommendations(report, base.backend, on_gpu=base.gpu_index is not None)
    report.skipped = session.skipped
    report.elapsed_s = time.monotonic() - session.started
    return report


def plan(workload: str | None, options: TuneOptions, nvml: Nvml):
    """(the base run, a notice, notes, the precisions to try): everything checked before any run."""
    unknown = [p for p in options.parts if p not in PARTS]
    if unknown:
        raise UsageError(f"unknown --parts {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    rules.above_zero("--budget-minutes", options.budget_s / 60, " minutes")
    protocol = options.protocol
    baseline_floor = protocol.warmup_steps * 0.05 + protocol.windows * protocol.window_seconds + 10
    if options.budget_s < baseline_floor:
        raise UsageError(
            f"--budget-minutes {options.budget_s / 60:g} is too small for even the baseline run "
            f"(~{baseline_floor:.0f} s of windows and start-up): give at least {math.ceil(baseline_floor / 60)} min"
        )
    if options.pipeline:
        path, _, function = options.pipeline.rpartition(":")
        if not path or not function.isidentifier() or not Path(path).is_file() or not path.endswith(".py"):
            raise UsageError(
                f"--pipeline {options.pipeline!r}: give an existing file.py:function that returns a tf.data.Dataset"
            )
        check_source(Path(path), function, "--pipeline", "a Python file that makes a tf.data pipeline")
        if not has_tensorflow():
            raise UsageError(
                "--pipeline measures a tf.data pipeline: install TensorFlow (pip install 'gpuscout[tensorflow]')"
            )
        options.pipeline = f"{Path(path).resolve()}:{function}"
    asked = {f.name: getattr(options, f.name) for f in fields(RunRequest)}
    bench_options = plans.BenchOptions(
        **{**asked, "protocol": protocol},
        device=options.device,
        model=options.model,
        pipeline_cost=options.pipeline_cost,
    )
    specs, notice = plans.plan([workload] if workload else [], bench_options, nvml)
    base = specs[0]
    precisions = [Precision.fp32, Precision.mixed_float16, Precision.mixed_bfloat16]
    notes = []
    if base.gpu_index is not None and not rules.has_bf16(nvml, base.gpu_index):
        precisions.remove(Precision.mixed_bfloat16)
        notes.append(
            f"mixed_bfloat16 left out: compute capability {nvml.gpu(base.gpu_index).compute_capability} "
            "has no bf16 tensor cores"
        )
    return base, notice, notes, precisions
