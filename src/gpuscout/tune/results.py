"""A `tune -- COMMAND` session's result as typed data (issue 61, item 2): each setting's judgement
(one row of the table) and the session's report, with declared fields. tune/judging.py makes the
rows, tune/search.py adds where each ran, tune/finale.py the report; report/tune_script.py prints
it. Its JSON (`--json`, the saved report) is `as_json()`: a row leaves out what its judgement
never reached (a failed run has no ratio), as the JSON always has."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpuscout.record.watch import Cause


class Judged(BaseModel):
    """A setting's runs against the reference runs beside them: the latest run's figures, and the
    speed-up of the pooled windows with its interval, the test and the verdict."""

    model_config = ConfigDict(extra="forbid")

    change: str  # the change's name, "baseline" or "patched copy"
    knob: str | None = None  # what it changes (jit_compile, workers, ...)
    line: str | None = None  # the code a user writes for it
    why: str | None = None  # what in the run made it worth trying
    run_id: str
    status: str
    applied: dict[str, str] = Field(default_factory=dict)  # what the child did, by knob
    # The run's figure: samples/s by the user's clock (its whole steady epochs, validation and
    # callbacks in) where it held them (`clock` "epochs"), else its steady windows' ("windows")
    samples_per_s: float | None = None
    ci95_low: float | None = None  # samples/s
    ci95_high: float | None = None
    clock: str | None = None  # epochs | windows: what samples_per_s is of
    ratio_clock: str | None = None  # epochs | windows: what ratio and verdict are of (epochs: both sides had them)
    epoch_s: float | None = None  # a steady epoch's median wall time
    epoch_steps: int | None = None  # steps a whole epoch trained
    windows_samples_per_s: float | None = None  # the steady windows' (training steps only)
    step_time_s: float | None = None
    input_wait_share: float | None = None
    gpu_busy_share: float | None = None
    peak_memory_bytes: int | None = None
    last_loss: float | None = None
    steps: int = 0
    note: str | None = None
    # against the reference's runs beside it
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    test: str | None = None
    verdict: str | None = None  # faster | slower | no significant difference | failed
    # the windows' speed-up beside the clock's, where the clock is the epochs'
    windows_ratio: float | None = None
    windows_ratio_low: float | None = None
    windows_ratio_high: float | None = None
    # the speed-up over the script's whole fit (the epochs it asks for, its first ones as they ran)
    whole_fit_ratio: float | None = None
    clock_note: str | None = None  # where the windows and the epochs disagree beyond their noise, and why
    changes_training: str | None = None  # how it trains otherwise than its reference (tune/same_training.py)
    training_checked: bool | None = None  # whole epochs ran on both sides: steps, samples, batches compared
    failure: str | None = None  # why it failed, where it did
    devices: int | None = None  # data parallelism: devices it trained on
    efficiency: float | None = None  # and its speed-up per device added
    healthy: bool | None = None  # its loss as good as the reference's (judging.health)
    health: str | None = None
    # where it ran in the search (tune/trials.Trial)
    round: int | None = None
    on: str | None = None  # the setting it was added to
    setting: str | None = None  # the whole setting it ran
    reference_run_ids: list[str] | None = None
    run_ids: list[str] | None = None
    noisy: str | None = None  # the reference runs beside it disagreed
    remeasured: bool | None = None
    chosen: bool | None = None  # the search picked it in its round (tune/search.py)
    kept: bool | None = None  # ... and runs after the search confirmed it (tune/confirm.py)
    confirmation: str | None = None  # the best: confirmed | not confirmed | undecided, and why
    agrees: bool | None = None  # the patched copy: its speed-up agrees with the injection's

    def set(self, **fields) -> Judged:
        """Fields added as the judgement goes (each then in the JSON)."""
        for name, value in fields.items():
            setattr(self, name, value)
        return self

    def as_json(self) -> dict:
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def faster(self) -> bool:
        """Faster with significance, healthy, and the same training: a speed-up that changes the
        training is never kept."""
        return self.verdict == "faster" and bool(self.healthy) and not self.changes_training


class Skipped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    change: str
    reason: str


class PatchMade(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    located: list[str]  # the changes written into the diff
    unlocated: dict[str, str]  # by change: why it could not be
    note: str | None


class TuneScriptReport(BaseModel):
    """A `tune -- COMMAND` session: the baseline, every setting measured, the best and its patch."""

    model_config = ConfigDict(extra="forbid")

    session: str
    created_utc: str
    command: list[str]
    workload: str
    steps: int  # each round's runs trained at least these
    # the script's steps an epoch, where every run trained whole epochs (judged by the user's clock)
    epoch_steps: int | None = None
    no_epochs: str | None = None  # ... or why the baseline's runs count steps instead
    baseline: Judged
    baseline_again: Judged
    noisy: str | None  # the baseline's two runs disagreed
    rows: list[Judged]
    diverged: Cause | None  # the script's own training diverged: watch's loss_not_finite cause
    path: list[str]  # the changes kept, in order: chosen by the search and confirmed between runs after it
    chosen: list[str] = Field(default_factory=list)  # the changes the search chose, kept or not
    rounds: int
    best: Judged | None
    patched: Judged | None
    patch: PatchMade | None
    diff: str | None
    skipped: list[Skipped]
    summary: str
    left: str
    wall_s: float
    run_ids: list[str]

    def as_json(self) -> dict:
        return self.model_dump(mode="json", exclude_unset=True)


class PlannedChange(BaseModel):
    """A change `tune --dry-run` would try, and why: what the stored watch showed."""

    model_config = ConfigDict(extra="forbid")

    change: str
    knob: str
    why: str
    line: str  # the code a user writes for it


class Rule(BaseModel):
    """When a kind of change is tried (tune/changes/: its `rule`)."""

    model_config = ConfigDict(extra="forbid")

    change: str
    when: str


class ScriptPlan(BaseModel):
    """`tune --dry-run -- COMMAND`: what the session would try first, from the latest stored watch of
    this script (`baseline`); without one, when each change is tried (`rules`). Nothing runs."""

    model_config = ConfigDict(extra="forbid")

    command: str
    baseline: str | None  # the stored watch planned from
    changes: list[PlannedChange]
    skipped: list[Skipped]  # change: why it would not be tried
    rules: list[Rule]  # without a stored watch: when each change is tried

    def as_json(self) -> dict:
        return self.model_dump(mode="json")
