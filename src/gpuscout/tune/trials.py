"""What tune's search holds: a setting (the changes applied together), a candidate measured in a
round (its runs and the reference runs beside them, judged), and the search's outcome (the path
kept, every trial, what was skipped). tune/search.py decides what runs; this is what it records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuscout.core.tune_settings import TuneSettings
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import judging
from gpuscout.tune.change import Change, Skip
from gpuscout.tune.changes import REPEATABLE, replaced
from gpuscout.tune.results import Judged

# A candidate is stopped once it has trained this many times its reference's training time, and
# judged on the steps it ran (its windows are of its own steps: a third of them is still four or
# more): a change 7x slower (the augmentation moved into the model on a CPU) ran 76 s of a 3-minute
# budget at the round's count, and left no time for the next candidate.
SLOWER_CUT = 3.0
# A best this many times the baseline (its intervals' low ends) is not told from a host's drift (a
# few percent, NOISY_SHARE's tenth at most) by runs taken together: the final block runs none, and
# the best's own run is set against the baseline's run of round 1 (issue 60: on an H100 the ViT left
# op by op spent 30 s on each baseline run, a twelfth of the session, to confirm a 600x)
CLEAR_RATIO = 3.0


@dataclass(frozen=True)
class Config:
    """Changes applied together (none: the baseline)."""

    changes: tuple[Change, ...] = ()

    @property
    def name(self) -> str:
        return "baseline" if not self.changes else "+".join(c.name for c in self.changes)

    @property
    def values(self) -> dict:
        """Its changes' settings together, as a run carries them (Change.settings)."""
        return {k: v for c in self.changes for k, v in c.settings.items()}

    @property
    def settings(self) -> TuneSettings:
        return TuneSettings.from_dict(self.values)

    @property
    def knobs(self) -> set[str]:
        return {c.knob for c in self.changes}

    def plus(self, change: Change) -> Config:
        # a repeatable kind replaces its earlier self; a kind also replaces the knobs it names (REPLACES)
        gone = replaced({change.knob}) | ({change.knob} & set(REPEATABLE))
        kept = tuple(c for c in self.changes if c.knob not in gone)
        return Config(kept + (change,))

    def as_change(self) -> Change | None:
        """The setting as one change for a run (None: the unchanged script)."""
        if not self.changes:
            return None
        if len(self.changes) == 1:
            return self.changes[0]
        return Change(
            self.name,
            "combined",
            self.values,
            "\n\n".join(c.line for c in self.changes),
            " + ".join(c.name for c in self.changes),
        )


@dataclass
class Trial:
    """A candidate measured in a round: its runs and the reference runs beside them."""

    round: int
    change: Change
    config: Config
    reference: Config
    steps: int  # the training steps its runs and the reference runs beside them trained
    runs: list[WatchRecord] = field(default_factory=list)
    beside: list[WatchRecord] = field(default_factory=list)  # the reference's runs before and after
    row: Judged | None = None  # its judgement, once the reference run after it ran

    def judge(self, batch_size: int | None) -> Judged:
        self.row = judging.judged(
            self.change, self.runs, self.beside, batch_size, self.config.settings, self.reference.settings
        )
        ran = min((r.main.steps for r in self.runs if r.main), default=self.steps)
        if ran < self.steps and any(r.main and r.main.stopped_by_limit for r in self.runs):
            cut = (
                f"stopped at {SLOWER_CUT:g}x its reference's training time: {ran} of {self.steps} steps, "
                "judged on those"
            )
            self.row.note = "; ".join(n for n in (self.row.note, cut) if n)
        self.row.set(
            round=self.round,
            on=self.reference.name,
            setting=self.config.name,
            reference_run_ids=[r.id for r in self.beside],
            run_ids=[r.id for r in self.runs],
        )
        noise = [n for a, b in zip(self.beside, self.beside[1:]) if (n := judging.noisy(a, b))]
        self.row.noisy = noise[0] if noise else None
        return self.row

    @property
    def faster(self) -> bool:
        return self.row is not None and self.row.faster


@dataclass
class Outcome:
    path: list[Trial] = field(default_factory=list)  # the changes kept, in order
    trials: list[Trial] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    rounds: int = 0
    asked: dict[str, int] = field(default_factory=dict)  # run id -> the training steps it was asked for

    @property
    def best(self) -> Config:
        return self.path[-1].config if self.path else Config()

    @property
    def clear(self) -> bool:
        """The changes kept are faster than the baseline by so much (the product of their intervals'
        low ends, CLEAR_RATIO or more) that no drift of the host between runs could make it: the
        final block runs no baseline, and the best's latest run is set against round 1's."""
        return math.prod(t.row.ratio_low or 1.0 for t in self.path) >= CLEAR_RATIO
