"""How a tune candidate is judged against the runs of its reference beside it: its samples/s and
their interval against the reference's, the significance of the difference, whether its training
stayed healthy (its loss compared where the two compare), and whether two runs of one setting
disagree by more than a host's noise. Used by the search (tune/search.py) and the final block
(tune/finale.py)."""

from __future__ import annotations

import math
import statistics

from gpuscout.analysis import epoch_clock
from gpuscout.analysis.compare import contrast
from gpuscout.core.tune_settings import TuneSettings
from gpuscout.core.units import counted
from gpuscout.record.epochs import EpochClock
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import same_training
from gpuscout.tune.change import Change
from gpuscout.tune.changes import CHANGES
from gpuscout.tune.results import Judged

# The loss a change may end at, against the baseline's at equal steps, before it is "clearly worse".
LOSS_WORSE_RATIO = 1.5
LOSS_WORSE_ABSOLUTE = 0.1
# Two runs of the same setting farther apart than this (their medians) say the machine was noisy.
NOISY_SHARE = 0.10


def rates(r: WatchRecord, batch_size: int | None, from_step: int = 0) -> list[float]:
    """The steady windows' samples/s (those that began at step `from_step` or later: a cache's
    after it filled); where the instrumentation could not count samples (the input read inside a
    compiled loop of steps_per_execution steps), from the steps and the batch the baseline fed,
    which the change did not touch."""
    steady = r.steady
    if from_step:
        began, at = {}, 1  # the first step (the compile) is in no window
        for w in r.windows:
            began[w.index], at = at, at + w.steps
        steady = [w for w in steady if began[w.index] >= from_step] or steady[-1:]
    counted = [w.samples_per_s for w in steady if w.samples_per_s is not None]
    if counted or not batch_size:
        return counted
    return [w.steps * batch_size / w.seconds for w in steady if w.seconds > 0]


def health(r: WatchRecord, baseline: WatchRecord) -> str | None:
    """Why a change's training is not healthy, or None: its loss clearly worse than the baseline's
    where the two compare (loss_point), or not finite. Losses after different counts of steps at
    the same batch say nothing of each other (the final block runs the baseline at its count and
    the best at its round's): then only a loss that is not finite is said."""
    loss, base = (r.main.last_loss if r.main else None), (baseline.main.last_loss if baseline.main else None)
    if loss is None or (not math.isfinite(loss) and base is not None and not math.isfinite(base)):
        return None  # the baseline diverges too: the session leads with that, not the change's doing
    if base is not None and math.isfinite(base) and r.main.steps != baseline.main.steps:
        base = None
    if not math.isfinite(loss):
        return (
            f"the loss is {loss} after {counted(r.main.steps, 'step')} (the baseline's: {base:.4g})"
            if base is not None
            else f"the loss is {loss}"
        )
    point = loss_point(r, baseline)
    if point is None:
        return None
    value, base, where = point
    if value > base * LOSS_WORSE_RATIO and value - base > LOSS_WORSE_ABSOLUTE:
        return f"the loss is {value:.4g} {where} against the baseline's {base:.4g}"
    return None


def loss_point(r: WatchRecord, baseline: WatchRecord) -> tuple[float, float, str] | None:
    """(the run's loss, the baseline's, where they were read) where the two compare: at equal
    steps of the same batch; for a larger batch, at the end of the run's first window that had
    seen as many samples as the baseline's whole run (issue 60: after equal steps a batch twice as
    large has seen twice the samples, and a loss read there is not the same training). Keras'
    loss is its mean over the epoch so far: at equal samples the two means cover the same share
    of an epoch. None where they do not compare."""
    main, other = r.main, baseline.main
    if main is None or other is None or other.last_loss is None or not math.isfinite(other.last_loss):
        return None
    if (main.batch_size or 0) <= (other.batch_size or 0) or not other.samples:
        if main.steps != other.steps or main.last_loss is None:
            return None
        return main.last_loss, other.last_loss, f"after {counted(main.steps, 'step')}"
    point, seen = None, main.samples
    for window in reversed(main.windows):  # the samples seen at each window's end, latest first
        if seen < other.samples:
            break
        if window.loss is not None and math.isfinite(window.loss):
            point = (window.loss, seen)
        seen -= window.samples or 0
    if point is None:
        return None
    return point[0], other.last_loss, f"after {point[1]:,} samples (the baseline's run: {other.samples:,})"


def row(change: Change | None, r: WatchRecord, baseline: WatchRecord) -> Judged:
    """One line of the table: a run's figures against one baseline run."""
    return judged(change, [r], [baseline], baseline.batch_size)


def fill_steps(settings: TuneSettings) -> int:
    """The steps a setting's cache takes to fill (its first period, or epoch, of batches); 0
    without a cache (tune/changes/cache.py puts them in its settings)."""
    return (settings.fill_steps or 0) if settings.cache else 0


def fill_epochs(settings: TuneSettings, epoch_steps: int | None) -> int:
    """The leading epochs a setting's runs spend starting (left out of their pace): the first,
    which compiles; with a cache, every epoch that still fills it (a generator replayed every
    `period` batches over epochs of fewer steps fills for several)."""
    fill = fill_steps(settings)
    if fill and epoch_steps:
        return max(epoch_clock.SKIPPED, math.ceil(fill / epoch_steps))
    return epoch_clock.SKIPPED


def clocks(runs: list[WatchRecord], settings: TuneSettings, batch: int | None = None) -> list[EpochClock]:
    """Each run's whole epochs, a cache's filling ones apart; `batch`: the samples of a step where
    a run did not count them (epoch_clock.epoch_clock)."""
    return [
        c
        for r in runs
        if r.main is not None
        and (
            c := epoch_clock.epoch_clock(
                r.main, fill_epochs(settings, r.main.epochs[0].steps if r.main.epochs else None), batch
            )
        )
        is not None
    ]


def judged(
    change: Change | None,
    runs: list[WatchRecord],
    beside: list[WatchRecord],
    batch: int | None,
    settings: TuneSettings | None = None,
    reference_settings: TuneSettings | None = None,
) -> Judged:
    """A setting's runs against the reference runs beside them. Judged by the user's clock where
    both sides ran whole steady epochs (MIN_EPOCHS of them pooled), else by the steady windows;
    the windows' figures stand beside the epochs' either way. `settings`: the whole setting the
    runs ran (its cache's fill epochs are left out of its pace); default: the change's own."""
    r = runs[-1]
    own = change.tuned if change else TuneSettings()  # the change's own settings, read once
    settings = settings if settings is not None else own
    out = Judged(
        change=change.name if change else "baseline",
        knob=change.knob if change else None,
        line=change.line if change else None,
        why=change.why if change else None,
        run_id=r.id,
        status=r.status,
        applied=r.applied,
        samples_per_s=r.windows_samples_per_s,
        ci95_low=r.throughput.ci95_low if r.throughput else None,
        ci95_high=r.throughput.ci95_high if r.throughput else None,
        step_time_s=r.step_time_s,
        input_wait_share=r.input_wait_share,
        gpu_busy_share=None if r.gpu_idle_share is None else 1 - r.gpu_idle_share,
        peak_memory_bytes=r.main.peak_memory_bytes if r.main else None,
        last_loss=r.main.last_loss if r.main else None,
        steps=r.main.steps if r.main else 0,
    )
    own_batch = batch if own.batch_size is None else None
    windows = [w for run in runs for w in rates(run, own_batch, fill_steps(settings))]
    if windows and not r.windows_samples_per_s:  # counted from steps: say so, and show the figure
        out.set(
            samples_per_s=statistics.median(windows), note=f"samples counted as steps x the baseline's batch ({batch})"
        )
    out.set(clock="windows", windows_samples_per_s=out.samples_per_s)  # until its epochs say otherwise
    own_clocks = clocks(runs, settings, own_batch)  # a larger batch's own samples, never the reference's
    if own_clocks:  # the latest run's figure by the user's clock, where it ran whole steady epochs
        latest = own_clocks[-1]
        out.set(epoch_s=latest.epoch_s, epoch_steps=latest.steady[-1].steps)
        if len(latest.steady) > 1:
            low, high = epoch_clock.rate_ci95(latest)
            out.set(clock="epochs", samples_per_s=latest.samples_per_s, ci95_low=low, ci95_high=high)
    missing = [
        k
        for k in (
            {change.knob}
            if change and change.knob != "combined"
            else {k for k in (change.settings if change else {}) if k in CHANGES}
        )
        if k not in r.applied
    ]
    if change is not None and missing:
        out.set(note=f"nothing in this script to apply {', '.join(sorted(missing))} to")
    elif (
        change is not None and own.mixed_precision and r.main and r.main.precision_policy in (None, "float32")
    ):  # what fit ran, whatever was set
        out.set(note="the policy was set, but the model trained in float32 (a layer or the script set its own)")
    failed = next((run for run in runs if not run.ok), None)
    if failed is not None or not windows:
        failed = failed or r
        why = failed.error.explanations[0] if failed.error and failed.error.explanations else None
        out.set(
            verdict="failed",
            healthy=False,
            failure=(
                f"{why.title}: {why.fix}"
                if why
                else (failed.verdict[0].evidence if failed.verdict else f"status {failed.status}")
            ),
        )
        return out
    base = [w for run in beside for w in rates(run, batch, fill_steps(reference_settings or TuneSettings()))]
    if change is not None and base:
        c = contrast(windows, base)
        out.set(
            ratio=c.ratio,
            ratio_low=c.ratio_low,
            ratio_high=c.ratio_high,
            p_value=c.p_value,
            test=c.test,
            verdict=c.verdict,
            windows_ratio=c.ratio,
            windows_ratio_low=c.ratio_low,
            windows_ratio_high=c.ratio_high,
            ratio_clock="windows",
        )
        if _by_epochs(out, own_clocks, clocks(beside, reference_settings or TuneSettings(), batch), r):
            out.set(ratio_clock="epochs")
        if r.main and r.main.replicas > 1 and beside[0].main and r.main.replicas > beside[0].main.replicas:
            # data parallelism: the speed-up per device added, against the reference's devices
            out.set(devices=r.main.replicas, efficiency=out.ratio * beside[0].main.replicas / r.main.replicas)
    problems = [p for run in runs if (p := health(run, beside[0] if beside else run))]
    out.set(healthy=not problems, health=problems[0] if problems else None)
    if change is not None and beside:
        different = same_training.differences(runs, beside, same_training.Declared.of(own))
        out.set(
            changes_training="; ".join(different) or None,
            training_checked=same_training.checked(runs, beside),
        )
    return out


# Steady epochs pooled on each side before the user's clock decides a verdict (a candidate's one
# run of script.MIN_RUN_EPOCHS: three): fewer and the windows (eight a run) judge, the epochs shown
# beside them. Against six reference epochs, Mann-Whitney's smallest p is 2/84 = 0.024.
MIN_EPOCHS = 3


def _by_epochs(out: Judged, own: list[EpochClock], reference: list[EpochClock], latest: WatchRecord) -> bool:
    """The verdict by the user's clock where both sides ran MIN_EPOCHS steady epochs, the windows'
    kept beside it; where the two disagree beyond their intervals, why (the share of an epoch
    outside its training steps: validation, callbacks, the time between epochs)."""
    mine = [x for c in own for x in epoch_clock.rates(c)]
    theirs = [x for c in reference for x in epoch_clock.rates(c)]
    if len(mine) < MIN_EPOCHS or len(theirs) < MIN_EPOCHS:
        return False
    c = contrast(mine, theirs)
    out.set(ratio=c.ratio, ratio_low=c.ratio_low, ratio_high=c.ratio_high, p_value=c.p_value, test=c.test)
    out.set(verdict=c.verdict)
    whole = [
        epoch_clock.whole_fit_s(k, latest.main.epochs_planned if latest.main else None) for k in (*reference, *own)
    ]
    whole_ref = [w for w in whole[: len(reference)] if w]
    whole_own = [w for w in whole[len(reference) :] if w]
    if whole_ref and whole_own:
        out.set(whole_fit_ratio=statistics.median(whole_ref) / statistics.median(whole_own))
    apart = (
        out.windows_ratio_low is not None
        and c.ratio_low is not None
        and (out.windows_ratio_low > c.ratio_high or c.ratio_low > out.windows_ratio_high)
    )
    if apart:
        outside = 1 - statistics.median(k.share("training_s") or 0 for k in reference)
        after = statistics.median(k.share("after_s") or 0 for k in reference)
        parts = f"validation and the callbacks at its end {after:.0%}" if after >= 0.05 else None
        between = statistics.median(k.share("between_s") or 0 for k in reference)
        if between >= 0.05:
            parts = ", ".join(p for p in (parts, f"the time between epochs {between:.0%}") if p)
        out.set(
            clock_note=(
                f"the training steps alone say {out.windows_ratio:.2f}x, whole epochs {c.ratio:.2f}x: "
                f"{outside:.0%} of the reference's epoch is outside its steps ({parts or 'Keras between steps'}), "
                "which the steps leave out"
            )
        )
    return True


def figure(r: WatchRecord) -> tuple[float | None, float | None, float | None]:
    """A run's samples/s with its interval: by its whole steady epochs where it ran two or more,
    else its steady windows'."""
    if r.clock is not None and len(r.clock.steady) > 1:
        low, high = epoch_clock.rate_ci95(r.clock)
        return r.clock.samples_per_s, low, high
    t = r.throughput
    return (t.median, t.ci95_low, t.ci95_high) if t else (None, None, None)


def noisy(first: WatchRecord, again: WatchRecord) -> str | None:
    """The baseline's two runs: when their medians differ beyond NOISY_SHARE and their intervals do
    not overlap, the session's differences under that are noise, and the table says so. Read on
    the windows (eight a run): a bootstrap over a run's three or four steady epochs is too narrow
    to tell a host's drift (it called a CPU's two baseline runs of a tf.data map apart, and the
    leaders measured again cost a session 4 of its 13 runs)."""
    a, b = first.throughput, again.throughput
    if not a or not b or not a.median or not b.median:
        return None
    apart = abs(b.median / a.median - 1)
    overlap = a.ci95_low is None or b.ci95_low is None or (a.ci95_low <= b.ci95_high and b.ci95_low <= a.ci95_high)
    if apart > NOISY_SHARE and not overlap:
        return (
            f"the baseline ran at {a.median:,.0f} and then {b.median:,.0f} samples/s ({apart:.0%} apart): the "
            f"machine was noisy, and differences under that mean nothing"
        )
    return None
