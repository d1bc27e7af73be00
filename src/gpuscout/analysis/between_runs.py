"""The run is the unit: how `compare` and its CI gate test one side's runs against another's.

A run's windows share what its process drew: its compilation and autotuning, its memory layout,
the GPU's clocks. Unchanged runs of one script on an H200 differed by up to 21% between processes
while each run's windows agreed within 2% (docs/benchmarks.md, "The CI gate on an H200"), so a
test of one run's windows against another's called 2 of 3 unchanged pull requests slower
(p < 1e-28). Each run is therefore one value, and a difference is judged against the spread
between runs:

- two runs or more a side: Welch's t on the runs' log values, the ratio exp(mean difference)
  (the ratio of the sides' geometric means) with its t interval;
- one run against two or more: that run against the others' spread, as a new observation
  (t = d / (s * sqrt(1 + 1/n)), n - 1 degrees of freedom: the prediction interval's test);
- one run a side: nothing to test. Nothing in one run each says how far unchanged runs fall apart.

A run's value is what its user's clock reads where every run compared has one (a watched
script's whole epochs: samples over their wall time, validation and callbacks in), else its
windows' median throughput (a benchmark's figure; a watched run too short for two whole epochs):
every run of a comparison is read the same way.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from gpuscout.record import StoredRecord

BY_EPOCHS = "whole epochs"
BY_WINDOWS = "windows"
# Where no count of runs would decide at the spread seen (the ratio on the threshold itself): a
# count above this is said as "more than"
MOST_RUNS = 100


def basis(records: list[StoredRecord]) -> str:
    """How a comparison's runs are each read: by their whole epochs where every one has them."""
    by_epochs = records and all(r.kind == "watch" and r.clock is not None and r.clock.samples_per_s for r in records)
    return BY_EPOCHS if by_epochs else BY_WINDOWS


def run_value(record: StoredRecord, how: str) -> float:
    """One run's figure, read as `how` (basis)."""
    if how == BY_EPOCHS:
        assert record.kind == "watch" and record.clock is not None and record.clock.samples_per_s
        return record.clock.samples_per_s
    return float(statistics.median(window_values(record)))


def window_values(r: StoredRecord) -> list[float]:
    """A run's steady windows' throughputs (samples/s for a watched script)."""
    fallback = [r.throughput.median] if r.throughput else []
    if r.kind == "watch":  # samples/s per window: for one batch size, the step times' order reversed
        return r.window_rates() or fallback
    return [w.throughput for w in r.windows] or fallback


def run_interval(record: StoredRecord, how: str) -> tuple[float | None, float | None]:
    """A single run's own 95% interval of its figure: within the run, not between runs."""
    if how == BY_EPOCHS:
        from gpuscout.analysis.epoch_clock import rate_ci95

        assert record.kind == "watch" and record.clock is not None
        return rate_ci95(record.clock)
    # from the windows the value is the median of, not the stored summary's interval: a record
    # whose summary disagrees with its windows (an edited export) drew a ratio of 1.000 with an
    # interval of 1e297 (issue 79.7)
    from gpuscout.analysis.stats import median_ci95

    return median_ci95(np.asarray(window_values(record), dtype=float))


def centre(values: list[float]) -> float:
    """Several runs' one figure: their geometric mean, the centre the tests below compare."""
    return float(math.exp(np.log(np.asarray(values, dtype=float)).mean()))


def centre_interval(values: list[float]) -> tuple[float | None, float | None]:
    """The 95% t interval of the runs' geometric mean (two runs or more)."""
    if len(values) < 2:
        return None, None
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    logs = np.log(np.asarray(values, dtype=float))
    half = float(student_t.ppf(0.975, len(logs) - 1)) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    mean = float(logs.mean())
    return math.exp(mean - half), math.exp(mean + half)


def welch(va: float, na: int, vb: float, nb: int) -> tuple[float, float]:
    """Welch's standard error of a difference of two means, sqrt(va/na + vb/nb), and its
    Welch-Satterthwaite degrees of freedom (1 where the error is 0), from each side's variance
    and count: the one formula the runs' test, its projection to more runs and tune's test of
    windows (analysis/compare.py welch_log) share."""
    a, b = va / na, vb / nb
    se = math.sqrt(a + b)
    return se, ((a + b) ** 2 / (a**2 / (na - 1) + b**2 / (nb - 1)) if se > 0 else 1.0)


@dataclass
class RunTest:
    """The candidate's runs against the baseline's, each run one value."""

    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    test: str  # "welch-t on 3+3 runs", "prediction-t on 1+3 runs"
    # Each side's variance of its runs' log values (baseline, candidate); a side of one run takes
    # the other's: what runs_to_decide projects from
    log_variances: tuple[float, float]


def run_test(baseline: list[float], candidate: list[float]) -> RunTest | None:
    """Each side's runs' values; None with one run a side (nothing to test against)."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    nb, nc = len(baseline), len(candidate)
    if nb < 2 and nc < 2:
        return None
    lb, lc = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    diff = float(lc.mean() - lb.mean())
    if nb >= 2 and nc >= 2:
        vb, vc = float(lb.var(ddof=1)), float(lc.var(ddof=1))
        se, df = welch(vb, nb, vc, nc)
        variances = (vb, vc)
        name = "welch-t"
    else:  # one run against the spread of the other side's
        many = lb if nb >= 2 else lc
        spread = float(many.std(ddof=1))
        variances = (spread**2, spread**2)
        se = spread * math.sqrt(1 + 1 / len(many))
        df = len(many) - 1
        name = "prediction-t"
    if se == 0:  # every run alike on both sides: equal, or as different as can be
        p, half = (1.0 if diff == 0 else 0.0), 0.0
    else:
        p = float(2 * student_t.sf(abs(diff / se), df))
        half = float(student_t.ppf(0.975, df)) * se
    return RunTest(
        math.exp(diff), math.exp(diff - half), math.exp(diff + half), p, f"{name} on {nc}+{nb} runs", variances
    )


def pooled_test(baseline: list[float], candidate: list[float], beside: list[list[float]]) -> RunTest | None:
    """The candidate's runs against the baseline's, the spread between runs pooled from both sides
    and each group in `beside` (runs of other settings measured in the same session, each group
    of one setting at one count): every group's log values about their own mean, with sum(n - 1)
    degrees of freedom, as Student's pooled t does. tune's confirmation judges so: on a log scale
    a host's noise multiplies every setting's pace alike, and two runs a side under Welch keep one
    degree of freedom (t = 12.7) where the side whose runs agree carries none of the spread; a 6x
    setting on an H100 read [0.26-139] that way (docs/benchmarks.md). One candidate run (tune's
    patched copy) is a new observation against that spread. None without a spread to judge by."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    if not baseline or not candidate or min(baseline + candidate) <= 0:
        return None
    lb, lc = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    groups = [g for g in (lb, lc, *(np.log(np.asarray(v, dtype=float)) for v in beside if min(v, default=0) > 0))]
    groups = [g for g in groups if len(g) > 1]
    df = sum(len(g) - 1 for g in groups)
    if df < 1:
        return None
    variance = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / df
    diff = float(lc.mean() - lb.mean())
    se = math.sqrt(variance * (1 / len(lb) + 1 / len(lc)))
    if se == 0:
        p, half = (1.0 if diff == 0 else 0.0), 0.0
    else:
        p = float(2 * student_t.sf(abs(diff / se), df))
        half = float(student_t.ppf(0.975, df)) * se
    test = f"pooled-t on {len(lc)}+{len(lb)} runs, the spread of {sum(len(g) for g in groups)}"
    return RunTest(math.exp(diff), math.exp(diff - half), math.exp(diff + half), p, test, (variance, variance))


def runs_to_decide(tested: RunTest, threshold: float) -> int | None:
    """About how many runs a side would decide a gate at `threshold` (a ratio, 1 - PCT/100), were
    the ratio and each side's spread between runs what they were: the fewest n whose Welch
    interval at n a side clears the gap that decides (the test run_test makes, at n a side). A
    ratio at or above the threshold passes once the interval's low end clears the threshold; one
    below it fails once the interval's high end clears 1 (a significant slowdown). None: no count
    up to MOST_RUNS would (the ratio on the threshold, or the spread many times the gap)."""
    d = math.log(tested.ratio)
    return _fewest_runs(d - math.log(threshold) if d >= math.log(threshold) else -d, tested.log_variances)


def runs_to_settle(tested: RunTest, line: float) -> int | None:
    """About how many runs a side would put the ratio's interval wholly on one side of `line` (tune's
    confirmation: above CONFIRM_MARGIN, or under it), were the ratio and the spreads what they were;
    None where no count up to MOST_RUNS would."""
    return _fewest_runs(abs(math.log(tested.ratio) - math.log(line)), tested.log_variances)


def _fewest_runs(gap: float, log_variances: tuple[float, float]) -> int | None:
    """The fewest n a side whose Welch half-interval, t(0.975, df) * sqrt((vb + vc) / n) on the log
    scale with df = (vb + vc)^2 / ((vb^2 + vc^2) / (n - 1)), is within `gap`; None up to MOST_RUNS."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    vb, vc = log_variances
    if gap <= 0 or vb + vc <= 0:
        return None
    for n in range(2, MOST_RUNS + 1):
        se, df = welch(vb, n, vc, n)
        if student_t.ppf(0.975, df) * se <= gap:
            return n
    return None
