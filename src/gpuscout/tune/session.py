"""A tune session: its runs, each an ordinary benchmark run stored with a `tune` tag, kept
within the --budget-minutes; and the input pipeline measured alone."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from gpuscout.core import backends
from gpuscout.core.errors import UserCodeError
from gpuscout.core.spec import Backend, RunSpec, Task
from gpuscout.executor.local import run_child
from gpuscout.measure import engine
from gpuscout.record.run import RunRecord, TuneTag
from gpuscout.store import Store
from gpuscout.tune.workload_results import PipelineAlone
from gpuscout.workloads.user import last_traceback


@dataclass
class Session:
    options: TuneOptions  # noqa: F821 (gpuscout.tune.TuneOptions: the session only reads it)
    engine: engine.Session
    store: Store
    progress: engine.Progress
    base: RunSpec
    started: float = field(default_factory=time.monotonic)
    durations: list[float] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def id(self) -> str:
        return self.engine.group_id

    def fits_budget(self, label: str) -> bool:
        """The first run always starts (tune() refused budgets below its floor); later ones only
        when the median run so far still fits in what is left."""
        if not self.durations:
            return True
        guess = statistics.median(self.durations)
        if time.monotonic() - self.started + guess > self.options.budget_s:
            self.skipped.append(label)
            self.progress.note(f"skipped {label}: it would overrun the --budget-minutes")
            return False
        return True

    def run(self, label: str, part: str, **changes) -> RunRecord | None:
        """One benchmark run of the base spec with `changes`, tagged and stored; None if skipped."""
        if not self.fits_budget(label):
            return None
        spec = self.base.model_copy(update=changes)
        self.count += 1
        self.progress.run_started(spec, label, self.count, 0)
        began = time.monotonic()
        record = engine.measure(spec, self.engine, on_event=lambda e: self.progress.event(spec, e))[0]
        self.durations.append(time.monotonic() - began)
        record = record.model_copy(update={"tune": TuneTag(session=self.id, part=part, label=label)})
        engine.keep(self.store, [record], self.progress)
        self.progress.run_finished(label, [record])
        return record

    def pipeline_alone(self, label: str, **changes) -> PipelineAlone | None:
        """The input pipeline without the model, in a child on the CPU; samples/s and its windows."""
        if not self.fits_budget(label):
            return None
        spec = self.base.model_copy(
            update={
                "task": Task.pipeline,
                "gpu_index": None,
                "backend": Backend.tensorflow if has_tensorflow() else self.base.backend,
                **changes,
            }
        )
        self.count += 1
        self.progress.run_started(spec, label, self.count, 0)
        began = time.monotonic()
        outcome = run_child(
            spec, timeout_s=self.options.measure.timeout_s, on_event=lambda e: self.progress.event(spec, e)
        )
        self.durations.append(time.monotonic() - began)
        if outcome.status != "ok":
            message = f"{label}: {outcome.message}"
            if spec.user_pipeline:  # measured first, before any model run: bad input, not a failed run
                raise UserCodeError(message, last_traceback(outcome.stderr_tail))
            self.progress.run_finished(label, [])
            return PipelineAlone(label=label, status=outcome.status, message=outcome.message)
        rates = [w.samples / w.duration_s for w in outcome.result.windows]
        self.progress.run_finished(label, [])
        return PipelineAlone(
            label=label,
            status="ok",
            source=outcome.result.pipeline_source,
            samples_per_s=statistics.median(rates),
            windows_samples_per_s=rates,
        )


def has_tensorflow() -> bool:
    return backends.is_installed(Backend.tensorflow)
