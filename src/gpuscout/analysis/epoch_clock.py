"""The user's clock: a fit's whole epochs as the script's own epoch timer sees them, from the end
of one epoch to the end of the next, so that validation, callbacks and what Keras does between
epochs (a generator restarted, a PyDataset's on_epoch_end) are in it. The windows (analysis/
watch_windows.py) say where a step's time goes; this says what a user waits for. tune judges a
change on it where its runs hold whole epochs, and watch shows it first."""

from __future__ import annotations

from gpuscout.record.epochs import ClockEpoch, EpochClock
from gpuscout.record.watch import WatchedFit

# The leading epochs left out of a fit's pace: the first holds the compile (and, on jax, the
# validation step's), as the protocol leaves out its warm-up steps.
SKIPPED = 1


def epoch_clock(fit: WatchedFit | None, skip: int = SKIPPED, batch: int | None = None) -> EpochClock | None:
    """The fit's whole epochs, the first `skip` apart; None with no steady epoch after them, or
    none whose samples are known. An epoch whose samples were not counted (a tf.data batch of an
    open shape read inside a compiled loop of several steps: record.watch.WatchedEpoch.samples 0)
    holds its steps times the fit's batch, or `batch` (the reference's, as its windows count them);
    with neither, it has no pace to read (a 0 samples/s clock judged 1.80x as 0.00x, 2026-12-02)."""
    if fit is None or fit.custom:
        return None
    epochs = sorted(fit.epochs, key=lambda e: e.epoch)
    if len(epochs) <= skip:
        return None
    batch = fit.batch_size or batch
    made = []
    for i, e in enumerate(epochs):
        # an epoch begins where the one before it ended (its validation and callbacks included)
        began = epochs[i - 1].epoch_end_monotonic_s if i else e.start_monotonic_s
        made.append(
            ClockEpoch(
                epoch=e.epoch,
                seconds=max(0.0, e.epoch_end_monotonic_s - began),
                steps=e.steps,
                samples=e.samples or (e.steps * batch if batch else 0),
                training_s=max(0.0, e.end_monotonic_s - e.start_monotonic_s),
                after_s=max(0.0, e.epoch_end_monotonic_s - e.end_monotonic_s),
                between_s=max(0.0, e.start_monotonic_s - began),
                validation_steps=e.validation_steps,
                validation_s=None
                if e.validation_s is None
                else max(0.0, min(e.validation_s, e.epoch_end_monotonic_s - e.end_monotonic_s)),
                first_batch=e.first_batch,
            )
        )
    if not all(e.samples for e in made[skip:]):
        return None
    return EpochClock(skipped=skip, first=made[:skip], steady=made[skip:])


def rates(clock: EpochClock | None) -> list[float]:
    """Each steady epoch's samples/s by the user's clock."""
    return [e.samples_per_s for e in clock.steady if e.seconds > 0] if clock else []


def whole_fit_s(clock: EpochClock, epochs: int | None) -> float | None:
    """The fit's wall time over `epochs` (the script's own count): its leading epochs as they ran,
    then the rest at the steady epochs' median. None without a count."""
    if not epochs or clock.epoch_s is None:
        return None
    return sum(e.seconds for e in clock.first) + max(0, epochs - clock.skipped) * clock.epoch_s


def rate_ci95(clock: EpochClock) -> tuple[float | None, float | None]:
    """A 95% bootstrap interval of the clock's samples/s (its steady epochs' samples over their
    time, resampled by epoch), as analysis/stats.py's intervals are drawn."""
    import numpy as np

    from gpuscout.analysis.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

    samples = np.asarray([e.samples for e in clock.steady], dtype=float)
    seconds = np.asarray([e.seconds for e in clock.steady], dtype=float)
    if len(samples) < 2 or seconds.sum() <= 0:
        return None, None
    picks = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(samples), size=(BOOTSTRAP_RESAMPLES, len(samples)))
    rates = samples[picks].sum(axis=1) / np.maximum(seconds[picks].sum(axis=1), 1e-12)
    return float(np.percentile(rates, 2.5)), float(np.percentile(rates, 97.5))
