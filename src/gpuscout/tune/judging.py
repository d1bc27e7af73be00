"""How a tune candidate is judged against the runs of its reference beside it: its samples/s and
their interval against the reference's, the significance of the difference, whether its training
stayed healthy (its loss compared where the two compare), and whether two runs of one setting
disagree by more than a host's noise. Used by the search (tune/search.py) and the final block
(tune/finale.py)."""

from __future__ import annotations

import math
import statistics

from gpuscout.analysis.compare import contrast
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import CHANGES, Change
from gpuscout.tune.results import Judged

# The loss a change may end at, against the baseline's at equal steps, before it is "clearly worse".
LOSS_WORSE_RATIO = 1.5
LOSS_WORSE_ABSOLUTE = 0.1
# Two runs of the same setting farther apart than this (their medians) say the machine was noisy.
NOISY_SHARE = 0.10


def rates(r: WatchRecord, batch_size: int | None) -> list[float]:
    """The steady windows' samples/s; where the instrumentation could not count samples (the input
    read inside a compiled loop of steps_per_execution steps), from the steps and the batch the
    baseline fed, which the change did not touch."""
    counted = r.window_samples_per_s()
    if counted or not batch_size:
        return counted
    return [w.steps * batch_size / w.seconds for w in r.steady if w.seconds > 0]


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
            f"the loss is {loss} after {r.main.steps} steps (the baseline's: {base:.4g})"
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
        return main.last_loss, other.last_loss, f"after {main.steps} steps"
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


def judged(change: Change | None, runs: list[WatchRecord], beside: list[WatchRecord], batch: int | None) -> Judged:
    """A setting's runs against the reference runs beside them: their steady windows pooled on
    each side (the figures shown are of the setting's latest run)."""
    r = runs[-1]
    out = Judged(
        change=change.name if change else "baseline",
        knob=change.knob if change else None,
        line=change.line if change else None,
        why=change.why if change else None,
        run_id=r.id,
        status=r.status,
        applied=r.applied,
        samples_per_s=r.samples_per_s,
        ci95_low=r.throughput.ci95_low if r.throughput else None,
        ci95_high=r.throughput.ci95_high if r.throughput else None,
        step_time_s=r.step_time_s,
        input_wait_share=r.input_wait_share,
        gpu_busy_share=None if r.gpu_idle_share is None else 1 - r.gpu_idle_share,
        peak_memory_bytes=r.main.peak_memory_bytes if r.main else None,
        last_loss=r.main.last_loss if r.main else None,
        steps=r.main.steps if r.main else 0,
    )
    own_batch = batch if change is None or "batch_size" not in change.settings else None
    windows = [w for run in runs for w in rates(run, own_batch)]
    if windows and not r.samples_per_s:  # counted from steps: say so, and show the figure
        out.set(
            samples_per_s=statistics.median(windows), note=f"samples counted as steps x the baseline's batch ({batch})"
        )
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
        change is not None
        and "mixed_precision" in change.settings
        and r.main
        and r.main.precision_policy in (None, "float32")
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
    base = [w for run in beside for w in rates(run, batch)]
    if change is not None and base:
        c = contrast(windows, base)
        out.set(
            ratio=c.ratio,
            ratio_low=c.ratio_low,
            ratio_high=c.ratio_high,
            p_value=c.p_value,
            test=c.test,
            verdict=c.verdict,
        )
        if r.main and r.main.replicas > 1 and beside[0].main and r.main.replicas > beside[0].main.replicas:
            # data parallelism: the speed-up per device added, against the reference's devices
            out.set(devices=r.main.replicas, efficiency=c.ratio * beside[0].main.replicas / r.main.replicas)
    problems = [p for run in runs if (p := health(run, beside[0] if beside else run))]
    out.set(healthy=not problems, health=problems[0] if problems else None)
    return out


def noisy(first: WatchRecord, again: WatchRecord) -> str | None:
    """The baseline's two runs: when their medians differ beyond NOISY_SHARE and their intervals do
    not overlap, the session's differences under that are noise, and the table says so."""
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
