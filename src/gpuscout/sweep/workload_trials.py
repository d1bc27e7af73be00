"""A sweep over one of gpuscout's workloads: each trial is a benchmark run that the engine measures
as `gpuscout bench` would (a measuring child on the trial's GPU, telemetry, the typed record),
with its metrics read from the record. Every trial is planned, so checked, before the first runs.
"""

from __future__ import annotations

import threading
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.core.spec import PROTOCOL, Backend, Protocol, RunSpec, build_spec
from gpuscout.measure import engine, plans, rules
from gpuscout.record.run import RunRecord
from gpuscout.sweep.expansion import Trial
from gpuscout.sweep.spec import SweepFile
from gpuscout.telemetry.nvml import Nvml

# What a trial reports of its record, by the names a sweep's metric can take.
METRICS = (
    "samples_per_s",
    "mfu",
    "achieved_tflops",
    "step_time_s",
    "epoch_time_s",
    "peak_memory_bytes",
    "compile_s",
    "loss",
)


def plan(sweep: SweepFile, trials: list[Trial], nvml: Nvml, first_gpu: int | None) -> dict[str, RunSpec]:
    """Each trial's run (planned for the first slot's device; the slot's GPU is set when it runs)."""
    specs = {}
    for trial in trials:
        values = {**sweep.bench, **trial.params}
        protocol = {k: values.pop(k) for k in list(values) if k in Protocol.model_fields}
        try:
            options = plans.BenchOptions(
                **values,
                protocol=Protocol(**{**PROTOCOL.model_dump(), **protocol}),
                device=rules.DeviceChoice(gpu=first_gpu, cpu=first_gpu is None),
                measure=engine.MeasureOptions(timeout_s=sweep.timeout_s),
            )
        except (TypeError, ValueError) as exc:  # a value of the wrong kind for its option
            raise UsageError(f"sweep {sweep.name}, trial {trial.index} {trial.params}: {exc}") from None
        try:
            (specs[trial.key],), _ = plans.plan([sweep.workload], options, nvml)
        except UsageError as exc:
            raise UsageError(f"sweep {sweep.name}, trial {trial.index} {trial.params}: {exc}") from None
    return specs


def on_slot(spec: RunSpec, gpu_index: int | None, compilation_cache: Path | None) -> RunSpec:
    """The trial's run on its slot's device, compiling through the sweep's cache (jax runs)."""
    cache = str(compilation_cache) if compilation_cache is not None and spec.backend is Backend.jax else None
    return build_spec(**{**spec.model_dump(), "gpu_index": gpu_index, "compilation_cache": cache})


def measure(spec: RunSpec, session: engine.Session, cancel: threading.Event) -> RunRecord:
    return engine.measure(spec, session, cancel=cancel)[0]


def metrics(record: RunRecord) -> dict:
    """The record's figures a sweep can rank by (the throughput in the record's unit as `throughput`)."""
    values = {name: getattr(record, name) for name in METRICS}
    values["throughput"] = record.throughput.median if record.throughput else None
    return {k: v for k, v in values.items() if isinstance(v, (int, float))}
