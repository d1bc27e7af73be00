"""What a tune session's runs cost and how long they train: each setting's measured pace, the
--budget-minutes charged at it, and the training steps of each round's runs."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from gpuscout.record.watch import WatchRecord
from gpuscout.tune import script


@dataclass(frozen=True)
class Pace:
    """A setting's measured run: its start-up (the command's time outside its training steps:
    imports, data loading, compilation) and its step, which price its next runs."""

    startup_s: float
    step_s: float
    samples_per_s: float | None = None

    def run_s(self, steps: int) -> float:
        return self.startup_s + steps * self.step_s


@dataclass
class Budget:
    """The session's --budget-minutes, each run charged at the pace of the setting it runs (a candidate at
    its reference's: the setting it is added to). Charging every run at the longest so far held a
    compiled step's candidates to the op-by-op baseline's 770 ms a step and spent a 5-minute
    budget on one round (issue 60)."""

    budget_s: float
    started: float = field(default_factory=time.monotonic)
    paces: dict[str, Pace] = field(default_factory=dict)  # by setting name, its latest run
    longest_s: float = 1.0  # the longest run so far: a setting not yet run is charged this

    def seen(self, record: WatchRecord, name: str = "baseline") -> None:
        took = record.duration_s or 0.0
        self.longest_s = max(self.longest_s, took)
        steps = record.main.steps if record.main else 0
        step = record.step_time_s or 0.0
        self.paces[name] = (
            Pace(max(0.0, took - steps * step), step, record.samples_per_s) if steps and step else Pace(took, 0.0)
        )

    def cost(self, name: str, steps: int) -> float:
        """What a run of setting `name` for `steps` training steps is expected to take."""
        pace = self.paces.get(name)
        return pace.run_s(steps) if pace is not None else self.longest_s

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def allows(self, costs_s: list[float]) -> bool:
        return sum(costs_s) <= self.left_s()


@dataclass(frozen=True)
class Steps:
    """How many training steps each run trains: `fixed` (--steps) for all, else each round sized
    to its reference's pace, ROUND_TRAINING_S of it and never fewer than `base` (the baseline's):
    a round on a compiled step measures seconds of training, not the 0.16 s that the op-by-op
    baseline's 32 steps gave it (issue 60). Runs compared with each other (a round's candidates
    and the reference runs beside them) always share a count, so their losses compare."""

    base: int
    fixed: bool = False

    def of(self, budget: Budget, reference: str) -> int:
        pace = budget.paces.get(reference)
        if self.fixed or pace is None or not pace.step_s:
            return self.base
        return max(self.base, math.ceil(script.ROUND_TRAINING_S / pace.step_s))

    def at_samples(self, count: int, reference_batch: int | None, batch: int | None) -> int:
        """A candidate's steps: its reference's `count`, or for a batch k times larger count / k
        (never fewer than MIN_STEPS): the same samples, so about the same time where the step
        grows with the batch (a batch of 2,048 at a round of 2,000 steps sized to batch 32 would
        train for minutes), and its loss read after the samples its reference's runs saw
        (judging.loss_point)."""
        if self.fixed or not reference_batch or not batch or batch <= reference_batch:
            return count
        return max(script.MIN_STEPS, math.ceil(count * reference_batch / batch))
