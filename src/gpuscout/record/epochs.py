"""A watched fit's epochs as stored: each epoch as the instrumentation timed it (`WatchEpoch`), and
the same epochs read by the user's own clock (`EpochClock`, analysis/epoch_clock.py derives it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypeAliasType

from gpuscout.record.child import Part
from gpuscout.record.run import Amount

# A number a user's training produced (a loss, a metric): NaN and infinities are data (a training
# that diverged), stored as they were.
Reading = Annotated[float, Field(allow_inf_nan=True)]
# One value of fit's logs as the script made it: a number, a custom metric's vector or matrix (as
# lists), or the text of anything else (child/step_outputs.log_value).
LogValue = TypeAliasType("LogValue", Reading | str | list["LogValue"])


class WatchEpoch(Part):
    epoch: int
    start_monotonic_s: float
    end_monotonic_s: float  # the training steps' end (validation comes after)
    epoch_end_monotonic_s: float  # with validation
    steps: int
    samples: int
    samples_per_s: Amount
    logs: dict[str, LogValue] = Field(default_factory=dict)  # fit's own: loss, metrics, val_*, as they were
    callbacks_s: dict[str, float] = Field(default_factory=dict)  # host seconds in each user callback's hooks
    validation_steps: int | None = None  # validation batches run at its end (None: a record before this)
    validation_s: Amount | None = None  # ... and their time, on_test_begin to on_test_end (None: likewise)
    # A digest of the epoch's first batch (its arrays' shapes and dtypes, its first and last sample):
    # whether a change feeds the batches the script does, and whether they are shuffled each epoch
    # (tune/same_training.py). None: not read (a tf.data input read inside a compiled loop)
    first_batch: str | None = None


class ClockEpoch(Part):
    """One whole epoch as the script's own clock sees it (analysis/epoch_clock.py): from the end of
    the epoch before (fit's first epoch: its start) to its own end, validation and callbacks in."""

    epoch: int
    seconds: Amount
    steps: int
    samples: int
    training_s: Amount  # its training steps
    after_s: Amount  # validation and the callbacks at its end
    validation_s: Amount | None = None  # of after_s, the validation's (None: a record before it was timed)
    between_s: Amount  # from the epoch before's end to its start: Keras' bookkeeping, the input restarted
    validation_steps: int | None = None
    first_batch: str | None = None  # WatchEpoch.first_batch

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


class EpochClock(Part):
    """The main fit's whole epochs: what the user's own epoch timer reads. The leading `skipped`
    epochs (the first holds the compile; a cache's first epochs fill it) are the fit's start; the
    `steady` ones after them are its pace."""

    skipped: int
    first: list[ClockEpoch]  # the skipped epochs
    steady: list[ClockEpoch]

    @property
    def samples_per_s(self) -> float | None:
        seconds = sum(e.seconds for e in self.steady)
        return sum(e.samples for e in self.steady) / seconds if seconds > 0 else None

    @property
    def epoch_s(self) -> float | None:
        """A steady epoch's median wall time."""
        times = sorted(e.seconds for e in self.steady)
        if not times:
            return None
        middle = len(times) // 2
        return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2

    def share(self, part: str) -> float | None:
        """The steady epochs' share of their time in `part` (training_s, after_s, between_s)."""
        seconds = sum(e.seconds for e in self.steady)
        return sum(getattr(e, part) for e in self.steady) / seconds if seconds > 0 else None
