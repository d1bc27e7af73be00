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
    epoch_steps: int | None = None  # a whole epoch's steps (its batch's), where the run held whole epochs

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
        """A setting's run priced: by its whole epochs' wall time a step (validation and callbacks
        in) where it held them, else its windows' step time."""
        took = record.duration_s or 0.0
        self.longest_s = max(self.longest_s, took)
        steps = record.main.steps if record.main else 0
        step = record.step_time_s or 0.0
        clock = record.clock
        epoch_steps = clock.steady[-1].steps if clock else None
        if clock and clock.epoch_s and epoch_steps:
            step = clock.epoch_s / epoch_steps
        self.paces[name] = (
            Pace(max(0.0, took - steps * step), step, record.windows_samples_per_s, epoch_steps)
            if steps and step
            else Pace(took, 0.0)
        )

    def cost(self, name: str, steps: int) -> float:
        """What a run of setting `name` for `steps` training steps is expected to take."""
        pace = self.paces.get(name)
        return pace.run_s(steps) if pace is not None else self.longest_s

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def allows(self, costs_s: list[float]) -> bool:
        return sum(costs_s) <= self.left_s()


# How much slower a cold first run's step may be than a warm one's: 964 ms against 226 ms (4.3x)
# for a generator-fed CNN beside other work on a 2-core CPU (issue 86, item 5)
COLD_FACTOR = 5.0


@dataclass(frozen=True)
class Steps:
    """How many training steps each run trains: `fixed` (--steps) for all, else each round sized
    to its reference's pace, ROUND_TRAINING_S of it and never fewer than `base` (the baseline's):
    a round on a compiled step measures seconds of training, not the 0.16 s that the op-by-op
    baseline's 32 steps gave it (issue 60). Runs compared with each other (a round's candidates
    and the reference runs beside them) always share a count, so their losses compare.

    With `epoch` (the script's steps an epoch, where known), a count at a pace that holds
    MIN_RUN_EPOCHS of them in EPOCH_RUN_AT_MOST_S is whole epochs, MIN_RUN_EPOCHS at least, and
    its run stops at the end of its last epoch, validation and callbacks run: what the user's own
    clock times (issue 74). Decided for each reference's pace: an op-by-op baseline's long epochs
    count steps, the compiled step kept from it whole epochs."""

    base: int
    fixed: bool = False
    epoch: int | None = None  # steps a whole epoch of the script trains; None: not known
    epoch_samples: int | None = None  # ... and its samples (a larger batch's epoch: the same samples)

    def of(self, budget: Budget, reference: str, least_epochs: int = 0) -> int:
        pace = budget.paces.get(reference)
        if self.fixed or pace is None or not pace.step_s:
            count = self.base
        else:
            count = max(self.base, math.ceil(script.ROUND_TRAINING_S / pace.step_s))
        epoch = (pace.epoch_steps if pace else None) or self.epoch
        if pace is not None and pace.step_s and not self.fits(pace.step_s, epoch):
            return count
        return self.whole(count, least_epochs, epoch)

    def fits(self, step_s: float, epoch: int | None = None) -> bool:
        """Whether runs at `step_s` a step (its wall time) hold MIN_RUN_EPOCHS whole epochs."""
        epoch = epoch or self.epoch
        return bool(epoch) and step_s * epoch * script.MIN_RUN_EPOCHS <= script.EPOCH_RUN_AT_MOST_S

    def cold_misfit(self, step_s: float) -> bool:
        """Whether a cold run's `step_s` says whole epochs do not fit where a warm run's may: not
        fixed by --steps, and within COLD_FACTOR of fitting (a pace many times past it is no cold
        start's doing, and a warm run would not change the answer)."""
        return not self.fixed and not self.fits(step_s) and self.fits(step_s / COLD_FACTOR)

    def whole(self, count: int, least_epochs: int = 0, epoch: int | None = None) -> int:
        """`count` rounded up to whole epochs of `epoch` steps (the script's), `least_epochs` at
        least (a cache's fill and its replay), and MIN_RUN_EPOCHS unless the user fixed the count
        (--steps: the epochs that hold it); as it is without epochs."""
        epoch = epoch or self.epoch
        if not self.epoch or not epoch:
            return count
        return max(math.ceil(count / epoch), 1 if self.fixed else script.MIN_RUN_EPOCHS, least_epochs) * epoch

    def epoch_at(self, batch: int | None, script_batch: int | None) -> int | None:
        """The steps of an epoch at `batch` (the script's own, or a larger one of the same samples)."""
        if not self.epoch or not batch or batch == script_batch or not self.epoch_samples:
            return self.epoch
        return math.ceil(self.epoch_samples / batch)

    def is_whole(self, count: int, batch: int | None, script_batch: int | None) -> bool:
        """Whether a run of `count` steps at `batch` is of whole epochs: it then stops at the end of
        its last, validation and callbacks run."""
        epoch = self.epoch_at(batch, script_batch)
        return bool(epoch) and count % epoch == 0

    def at_samples(self, count: int, reference_batch: int | None, batch: int | None) -> int:
        """A candidate's steps: its reference's `count`, or for a batch k times larger count / k
        (never fewer than MIN_STEPS): the same samples, so about the same time where the step
        grows with the batch (a batch of 2,048 at a round of 2,000 steps sized to batch 32 would
        train for minutes), and its loss read after the samples its reference's runs saw
        (judging.loss_point). A count of whole epochs: as many epochs, each of the batch's steps."""
        if not reference_batch or not batch or batch == reference_batch:
            return count
        if self.epoch and self.epoch_samples:
            reference_epoch = math.ceil(self.epoch_samples / reference_batch)
            if count % reference_epoch == 0:  # as many epochs, of the batch's own steps
                return count // reference_epoch * math.ceil(self.epoch_samples / batch)
        if self.fixed or batch < reference_batch:
            return count
        return max(script.MIN_STEPS, math.ceil(count * reference_batch / batch))


def script_epoch(probe: WatchRecord) -> tuple[int, int] | str:
    """(steps, samples) of the script's epoch, else why it is not known: runs then count steps,
    judged by their windows alone."""
    main = probe.main
    if main is None or main.custom:
        return "the training is a loop of the script's own, with no epochs of Keras'"
    steps = next((e.steps for e in main.epochs), None) or main.steps_per_epoch
    if not steps:
        return "the epoch's length was not seen (an input without one, and no epoch ended in the first run)"
    return steps, next((e.samples for e in main.epochs), None) or steps * (main.batch_size or 0)


def epoch_step_s(probe: WatchRecord, step_s: float | None) -> float | None:
    """The wall time of a step by the probe's whole epochs (validation in), else its steps' pace."""
    clock = probe.clock
    if clock and clock.epoch_s and clock.steady:
        return clock.epoch_s / clock.steady[-1].steps
    return step_s
