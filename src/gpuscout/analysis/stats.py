"""Statistics of timing windows and of independent runs (docs/methodology.md).

Median as the centre (robust to a disturbed window, as hyperfine and pytest-benchmark report
it), IQR and coefficient of variation for spread, a 95% confidence interval of the median by
percentile bootstrap (scipy.stats.bootstrap, fixed seed: the same windows always give the same
interval), and across runs MLPerf's olympic mean once there are 5 or more.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import asdict, dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def import_scipy_in_background() -> None:
    """Import scipy.stats on a daemon thread. It takes ~1.5 s (python -X importtime, 2-core CI
    machine), so importing it at the top slowed every CLI command, and importing it when the
    first interval is computed put that time on a benchmark's (and each sweep trial's) critical
    path after its child ended. Called as a child starts, it overlaps the child's own start-up
    instead; Python's import lock makes a later `from scipy import stats` wait for it rather
    than import twice. Once imported (tune and scale run many children), there is nothing to do."""
    if "scipy.stats" in sys.modules:
        return
    threading.Thread(target=__import__, args=("scipy.stats",), daemon=True, name="gpuscout-import-scipy").start()


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    min: float
    max: float
    iqr: float
    cv: float | None  # sample standard deviation / mean; None for one value
    ci95_low: float | None  # 95% CI of the median; None for one value
    ci95_high: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(values) -> Summary:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values to summarise")
    q1, q3 = np.percentile(x, [25, 75])
    cv = float(np.std(x, ddof=1) / np.mean(x)) if x.size > 1 and np.mean(x) != 0 else None
    low, high = median_ci95(x)
    return Summary(
        n=int(x.size),
        median=float(np.median(x)),
        mean=float(np.mean(x)),
        min=float(x.min()),
        max=float(x.max()),
        iqr=float(q3 - q1),
        cv=cv,
        ci95_low=low,
        ci95_high=high,
    )


def median_ci95(x: np.ndarray) -> tuple[float | None, float | None]:
    if x.size < 2:
        return None, None
    if np.all(x == x[0]):  # bootstrap is degenerate; every resample has this median
        return float(x[0]), float(x[0])
    from scipy import stats  # not at the top: see import_scipy_in_background

    result = stats.bootstrap(
        (x,),
        np.median,
        confidence_level=0.95,
        n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
        vectorized=True,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def olympic_mean(values) -> float:
    """Mean after dropping one minimum and one maximum (MLPerf Training rules, 5+ results)."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size < 5:
        raise ValueError(f"the olympic mean needs at least 5 values, got {x.size}")
    return float(np.mean(x[1:-1]))


def across_runs(values) -> dict:
    """Summary of independent runs' medians: olympic mean when there are 5+, else the mean."""
    x = np.asarray(values, dtype=float)
    if x.size >= 5:
        centre, method = olympic_mean(x), "olympic_mean"
    else:
        centre, method = float(np.mean(x)), "mean"
    return {
        "n": int(x.size),
        "centre": centre,
        "method": method,
        "min": float(x.min()),
        "max": float(x.max()),
        "cv": float(np.std(x, ddof=1) / np.mean(x)) if x.size > 1 else None,
    }


def covered_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by (start, end) intervals, overlaps counted once and gaps not at all (a
    sweep's GPU busy time; the span of trials run by several drivers one after another)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
