"""Measuring a planned run: executor -> telemetry -> derive -> store, with one progress protocol.

Verbs plan runs (RunSpecs) and render what comes back; this module measures them. `measure`
starts the child (executor/local.py), samples NVML for each of the run's GPUs from this process
while it runs, and derives the records (analysis/derive.py); `run` does that for a list of runs,
storing each record as it comes and telling a `Progress` what happens.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuscout.analysis.derive import RunContext, derive
from gpuscout.analysis.stats import import_scipy_in_background
from gpuscout.analysis.telemetry import summarize_telemetry
from gpuscout.catalog.pricing import PricingOptions
from gpuscout.core.provenance import host_provenance
from gpuscout.core.spec import RunSpec
from gpuscout.executor.local import child_env, run_child
from gpuscout.executor.process import process_tree
from gpuscout.record.run import ComputeProcess, GpuInfo, RunRecord
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import DEFAULT_INTERVAL_S, Sampler

# A run that has not finished in 30 minutes is stopped and stored as `timeout`: compilation plus
# the protocol takes 1-3 minutes for the suite's models on an H200 (docs/benchmarks.md).
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class MeasureOptions:
    """How runs are measured, beyond what their RunSpec says."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    telemetry: bool = True
    telemetry_interval_s: float = DEFAULT_INTERVAL_S
    pricing: PricingOptions = field(default_factory=PricingOptions)


class Progress:
    """What the engine tells a display about each run; the default displays nothing."""

    def run_started(self, spec: RunSpec, label: str, number: int, total: int) -> None: ...
    def event(self, spec: RunSpec, event: dict) -> None: ...
    def run_finished(self, label: str, records: list[RunRecord]) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Session:
    """What the runs of one command share: NVML, the host's provenance and a group id."""

    nvml: Nvml
    options: MeasureOptions = field(default_factory=MeasureOptions)
    group_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    host: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.host = self.host or host_provenance(self.nvml)


def measure(
    spec: RunSpec,
    session: Session,
    *,
    repeat: int = 0,
    on_event: Callable[[dict], None] = lambda event: None,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> list[RunRecord]:
    """One run in a child, with telemetry sampled for each of its GPUs; its records (one, or one
    per batch size for inference). `env`: the child's environment when the caller sets more than
    child_env() does (TF_CONFIG); `cancel` stops the child."""
    nvml, options = session.nvml, session.options
    gpus = [nvml.gpu(i) for i in spec.gpus] if nvml.available else []
    env = env if env is not None else child_env(spec)
    samplers = (
        [Sampler(nvml, gpu.index, options.telemetry_interval_s).start() for gpu in gpus] if options.telemetry else []
    )
    during: dict[int, list[ComputeProcess]] = {}
    child_pid: list[int] = []  # the guard's (executor/guard.py), then every process under it

    def watch(event: dict) -> None:
        # One process-list call mid-run (never in the sampling loop): who else is on the GPU now.
        if event.get("event") == "warmed_up":
            child_pid.extend(process_tree(child_pid[0]) if child_pid else ())
            for gpu in gpus:
                during[gpu.index] = nvml.compute_processes(gpu.index)
        on_event(event)

    import_scipy_in_background()  # the statistics need it once the child ends
    try:
        outcome = run_child(
            spec, timeout_s=options.timeout_s, on_event=watch, env=env, on_start=child_pid.append, cancel=cancel
        )
    finally:
        samples = [sampler.stop() for sampler in samplers]
    others = sorted(
        {
            pid
            for gpu in gpus
            for pid in other_pids(gpu, during.get(gpu.index, []), nvml.compute_processes(gpu.index), child_pid)
        }
    )

    def telemetry(windows, measured_samples):
        if not any(samples):
            return []
        return [
            summarize_telemetry(s, windows, measured_samples, options.telemetry_interval_s, index=g.index)
            for g, s in zip(gpus, samples)
        ]

    ctx = RunContext(
        gpus=gpus,
        environment=session.host,
        child_env=env,
        group_id=session.group_id,
        repeat_index=repeat,
        telemetry=telemetry,
        other_pids=others,
        pricing=options.pricing,
    )
    return derive(spec, outcome, ctx)


def other_pids(
    gpu: GpuInfo, during: list[ComputeProcess], after: list[ComputeProcess], child_pid: list[int]
) -> list[int]:
    """Pids of other compute processes seen on a GPU before, during or after the run."""
    ours = set(child_pid)
    others = {p.pid for p in gpu.compute_processes + after} - ours
    seen = {p.pid for p in during}
    if seen & ours:
        others |= seen - ours
    elif len(seen) > 1:
        # In a container NVML can report host pids, so our child's pid may not appear: one
        # process during the run is ours, more mean someone else is on the GPU too.
        others |= seen
    return sorted(others)


def keep(store: Store, records: list, progress: Progress) -> None:
    """Store a measurement's records; when the store cannot take them they are saved beside it
    (Store.keep) and the runs go on: said once in full, then in short."""
    first = store.rescue.path is None
    if not store.keep(records):
        progress.note(
            f"this run could not be stored: {store.rescue.reason}; it is saved in {store.rescue.path}, "
            "and the runs go on"
            if first
            else f"this run too is saved in {store.rescue.path}"
        )


def run(
    runs: list[tuple[RunSpec, str]],
    session: Session,
    store: Store,
    progress: Progress | None = None,
    *,
    repeats: int = 1,
    tag: Callable[[RunRecord], RunRecord] = lambda r: r,
) -> list[RunRecord]:
    """Measure each (spec, label) `repeats` times, storing every record as it comes (`tag` adds
    what the verb keeps with it); the records in order."""
    progress = progress or Progress()
    records: list[RunRecord] = []
    total, number = len(runs) * repeats, 0
    for repeat in range(repeats):
        for spec, label in runs:
            number += 1
            progress.run_started(spec, label, number, total)
            made = [
                tag(r) for r in measure(spec, session, repeat=repeat, on_event=lambda e, s=spec: progress.event(s, e))
            ]
            keep(store, made, progress)
            records.extend(made)
            progress.run_finished(label, made)
    return records
