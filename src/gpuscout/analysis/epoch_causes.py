"""What a watched fit's epochs spend outside their training steps (issue 75): validation, the
epoch's end (its callbacks, Keras' own bookkeeping) and the time between one epoch's end and the
next one's first step (an input restarted: a generator's or a PyDataset's epoch start). The
windows leave all three out, and the user's own clock (analysis/epoch_clock.py) holds them:
where they take EPOCH_OUTSIDE_SHARE of the steady epochs, the verdict names each with its share
and what would shorten it."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout.record.epochs import EpochClock
from gpuscout.record.watch import Cause, WatchedFit, WatchRecord

# An epoch's time outside its training steps worth a finding of its own (the verdict names the
# loop's own work between steps from the same share: verdict.OUTSIDE_STEP_SHARE)
EPOCH_OUTSIDE_SHARE = 0.10
# A part under this share of the epoch is not named, and under FIX_SHARE it gets no advice
PART_SHARE = 0.01
FIX_SHARE = 0.05


@dataclass(frozen=True)
class EpochParts:
    """Seconds of the steady epochs, by part."""

    seconds: float
    training_s: float
    validation_s: float
    end_s: float  # the epoch's end after validation: callbacks, Keras' bookkeeping
    between_s: float
    validation_steps: int | None  # an epoch's, where counted

    @property
    def outside_s(self) -> float:
        return self.validation_s + self.end_s + self.between_s

    def share(self, seconds: float) -> float:
        return seconds / self.seconds if self.seconds > 0 else 0.0


def parts(clock: EpochClock | None) -> EpochParts | None:
    """The steady epochs' time by part; None without a steady epoch."""
    if clock is None or not clock.steady:
        return None
    steady = clock.steady
    validation = sum(e.validation_s or 0.0 for e in steady)
    counted = [e.validation_steps for e in steady if e.validation_steps is not None]
    return EpochParts(
        seconds=sum(e.seconds for e in steady),
        training_s=sum(e.training_s for e in steady),
        validation_s=validation,
        end_s=max(0.0, sum(e.after_s for e in steady) - validation),
        between_s=sum(e.between_s for e in steady),
        validation_steps=max(counted) if counted else None,
    )


def described(p: EpochParts, epochs: int) -> str:
    """Each part's time an epoch and its share, the training steps first."""
    named = [
        ("training steps", p.training_s, ""),
        ("validation", p.validation_s, f", {p.validation_steps:,} batches" if p.validation_steps else ""),
        ("the epoch's end", p.end_s, ""),
        ("between epochs", p.between_s, ""),
    ]
    return ", ".join(
        f"{name} {_seconds(seconds / epochs)} ({p.share(seconds):.0%}{more})"
        for name, seconds, more in named
        if p.share(seconds) >= PART_SHARE
    )


def outside_steps(r: WatchRecord, main: WatchedFit) -> Cause | None:
    """The steady epochs' time outside their training steps, where it is EPOCH_OUTSIDE_SHARE or
    more: each part with its share, and the change that shortens the largest."""
    p = parts(r.clock)
    if p is None or p.share(p.outside_s) < EPOCH_OUTSIDE_SHARE:
        return None
    epochs = len(r.clock.steady)
    fixes = []
    if p.share(p.validation_s) >= FIX_SHARE:
        fixes.append(
            (
                p.validation_s,
                "validate less often (fit(..., validation_freq=5)), on fewer batches (validation_steps), or at a "
                "larger validation_batch_size (no gradients are kept: it fits where training's batch did)",
            )
        )
    if p.share(p.end_s) >= FIX_SHARE:
        slowest = _slowest_callback(main)
        fixes.append(
            (
                p.end_s,
                "lighten what runs at each epoch's end"
                + (f" ({slowest} takes the most)" if slowest else "")
                + ": save checkpoints less often (ModelCheckpoint(save_freq=...)), or only the weights",
            )
        )
    if p.share(p.between_s) >= FIX_SHARE:
        fixes.append(
            (
                p.between_s,
                f"start each epoch's input sooner ({main.input_type}: an iterator made again each epoch, a "
                "PyDataset's on_epoch_end): make it once (a repeated tf.data dataset, an endless generator with "
                "steps_per_epoch) or move the epoch-start work out of the loop",
            )
        )
    fixes.sort(key=lambda f: -f[0])
    if not fixes:  # outside the steps in parts too small each to name a fix for
        fixes.append((0.0, "no one part is large: the steps' own time is what is left to shorten"))
    return Cause(
        code="epoch_outside_steps",
        saving_share=p.share(p.outside_s),
        message=f"{p.share(p.outside_s):.0%} of each epoch is outside its training steps, which the step's "
        "figures leave out",
        evidence=f"an epoch over {epochs} whole epoch(s) after the first: {described(p, epochs)}",
        fix="; ".join(f for _, f in fixes),
    )


def _slowest_callback(main: WatchedFit) -> str | None:
    totals: dict[str, float] = {}
    for e in main.epochs:
        for name, seconds in e.callbacks_s.items():
            totals[name] = totals.get(name, 0.0) + seconds
    return max(totals, key=totals.get) if totals and max(totals.values()) >= 1e-3 else None


def _seconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"
