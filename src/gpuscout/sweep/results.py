"""A sweep's summary as typed data (issue 61, item 2): the trials ranked, what the sweep took and
cost, and where its files are, with declared fields. sweep/summary.py makes it, the driver adds
its cache's and TensorBoard's parts, report/sweep.py prints it; `--json` and the sweep's
summary.json are `as_json()`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuscout.sweep.spec import Metric, Strategy


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ranked(Part):
    """A trial as the summary ranks it."""

    index: int
    params: dict[str, Any]
    value: float  # the sweep's metric, as it reported it last
    epochs: int  # reports it made
    duration_s: float
    slot: str
    log_dir: str


class CompilationCache(Part):
    folder: str
    programs: int  # workload trials' compiled programs
    hits: int  # of them loaded from the cache


class TensorBoard(Part):
    logdir: str | None  # None: none written
    note: str  # how to open them, or why there are none


class RungRank(Part):
    """The best trial's rank among those that reported at a rung's epoch."""

    epoch: int
    rank: int
    of: int


class Bracket(Part):
    """hyperband: how many trials a bracket held, and the epoch it judges them from."""

    trials: int
    judged_from_epoch: int


class ChanceToWin(Part):
    """How likely a pruned trial was to win (sweep/stopping.could_have_won): of the `of` finished
    trials that stood as low at `epoch`, `won` still ended within the winner's `noise`."""

    share: float | None  # None from one such curve: a count, never a chance
    won: int
    of: int
    epoch: int
    share_low: float | None  # Wilson 95% interval of the share
    share_high: float | None
    noise: float
    pruned_told: int  # pruned trials whose chance could be told
    pruned: int


class EarlyStopSummary(Part):
    """What early stopping decided and saved (sweep/stopping.stopping_summary)."""

    kind: str
    pruned: int
    epochs_run: int
    epochs_planned: int
    epochs_synchronous: int | None  # the same trials under the synchronous schedule (None: no rungs)
    trial_hours_used: float
    trial_hours_saved: float  # the pruned trials' epochs not run, at the trials' pace
    trial_start_s: float  # the pace: start-up, then seconds an epoch (stopping.trial_pace)
    epoch_s: float
    best_rank_at_rungs: list[RungRank]
    pruned_could_win: ChanceToWin | None
    finished: int  # trials that ran to their end: the curves the chance is read from
    brackets: list[Bracket] | None  # hyperband only


class WarmStart(Part):
    """Command trials forked from a warm interpreter (executor/warm.py)."""

    trials: int  # of this execution's trials, those forked
    of: int
    interpreters: int
    imported: list[str]  # what the interpreters imported before the trials
    ready_s: float  # the longest an interpreter took to import them
    refused: list[str]  # why an interpreter would not serve


class SweepSummary(Part):
    sweep: str
    metric: Metric
    trials: int
    run_now: int
    skipped_done: int
    status_counts: dict[str, int]  # ok, pruned, failed, oom, timeout
    stopped: str | None  # why the sweep stopped early
    best: list[Ranked]  # the five best that ran to their end
    timed_out: list[Ranked]  # killed at the trial timeout after reporting: their last report
    diverged: list[int]  # trials whose metric ended NaN or infinite
    wall_s: float
    trial_seconds_sum: float
    parallel_speedup: float | None
    trials_per_hour: float | None
    gpu_hours: float
    gpu_busy_s: dict[str, float]  # by GPU (gpu0, ...)
    gpu_idle_share: dict[str, float | None]
    gpu_gap_share: dict[str, float | None]  # idle while trials were left: the scheduler's cost
    gpu_drain_share: dict[str, float | None]  # idle at the end, no trial left to give it
    cost_usd: float | None
    log_root: str
    notes: list[str]
    strategy: Strategy
    early_stop: EarlyStopSummary | None
    compilation_cache: CompilationCache | None = None
    tensorboard: TensorBoard | None = None
    # command trials forked from a warm interpreter (executor/warm.py): how many, what it imported,
    # how long its imports took, why one would not serve
    warm_start: WarmStart | None = None

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def failed(self) -> bool:
        """The exit status' reason: stopped early, or no trial ended ok."""
        return bool(self.stopped) or self.status_counts.get("ok", 0) == 0
