"""A sweep trial as the store keeps it (store/trials.py's `trials` table): typed where it crosses
from the store to the sweep's summary, its early-stopping account, resume, recommend's sweep cost,
the report and MLflow.

A row's `result_json` is the trial's outcome (sweep/runner.TrialResult.outcome) once it has ended,
or only its driver's lease while it runs. Rows written by any gpuscout version read back: fields
this version does not know are ignored, those it knows and a row lacks take their defaults. What
a trial reports is the training's own (a NaN loss, a metric's text), so values are not judged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Row(BaseModel):
    """A part of a stored trial's row: read from any version, its values as the trial made them."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=True)


class TrialMetric(Row):
    """The sweep's metric when the trial ran (what `report` plots it by)."""

    name: str
    direction: Literal["max", "min"] = "max"


class TrialSteps(Row):
    """A command trial's step timing: its main fit's (analysis/watch.summary)."""

    steps: int = 0
    batch_size: int | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    input_wait_share: float | None = None
    outside_step_share: float | None = None
    compile_s: float | None = None
    precision_policy: str | None = None
    backend: str | None = None
    epochs_planned: int | None = None


class TrialTelemetry(Row):
    """The trial's GPU over its run (sweep/runner.py samples it)."""

    samples: int = 0
    gpu_name: str | None = None
    gpu_util_mean_pct: float | None = None
    power_mean_w: float | None = None
    memory_used_max_bytes: int | None = None


# What a trial's history entry and its metrics hold: what the script reported, by name (numbers,
# NaN and infinity included, or the text of anything else); "epoch" or "step" says when.
Reported = dict[str, Any]


class TrialOutcome(Row):
    """How a trial ended and what it reported."""

    key: str
    index: int
    params: dict[str, Any] = Field(default_factory=dict)
    status: str  # ok | failed | oom | timeout | pruned | interrupted
    attempts: int = 1
    slot: str = ""
    gpu_index: int | None = None
    started_monotonic_s: float = 0.0
    ended_monotonic_s: float = 0.0
    duration_s: float = 0.0
    metrics: Reported = Field(default_factory=dict)  # the last value reported of each metric
    history: list[Reported] = Field(default_factory=list)  # every report, in order
    message: str | None = None
    log_dir: str | None = None
    telemetry: TrialTelemetry | None = None
    run_id: str | None = None  # workload sweeps: the stored benchmark run
    steps: TrialSteps | None = None  # command trials
    explanations: list[dict[str, Any]] = Field(default_factory=list)  # known failures (gpuscout.explain)
    command: list[str] | None = None  # command trials: the argv run
    ours: bool = False  # ended by gpuscout's failure, not the trial's
    warm: bool = False  # forked from the sweep's warm interpreter (executor/warm.py)
    metric: TrialMetric | None = None  # None: a row from before the metric was kept with it

    def value(self, metric: str) -> Any:
        """The last value the trial reported of `metric` (None: it reported none)."""
        return self.metrics.get(metric)


class StoredTrial(Row):
    """One row of the `trials` table."""

    key: str
    index: int
    sweep_hash: str
    status: str  # running, or how it ended
    params: dict[str, Any]
    result: TrialOutcome | None  # None while it runs (or a row whose result could not be read)
    owner: dict[str, Any] | None = None  # while it runs: its driver (sweep/leases.py)
