import math

import numpy as np
import pytest

from gpuscout.analysis.stats import across_runs, olympic_mean, summarize


def test_summary_exact_values_on_five_windows():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s.iqr == 2.0  # numpy linear percentiles: q1 = 2, q3 = 4
    assert s.cv == pytest.approx(math.sqrt(2.5) / 3.0, rel=1e-12)  # sample sd / mean


def test_ci_of_median_brackets_the_median_and_lies_in_the_data():
    values = [100.0, 101.0, 99.5, 100.4, 100.2, 98.0, 103.0]
    s = summarize(values)
    assert min(values) <= s.ci95_low <= s.median <= s.ci95_high <= max(values)
    assert s.ci95_low < s.ci95_high


def test_ci_is_reproducible():
    values = [10.0, 11.0, 12.5, 9.0, 10.5]
    assert summarize(values) == summarize(values)


def test_constant_windows_have_a_point_interval_and_zero_cv():
    s = summarize([7.0, 7.0, 7.0])
    assert (s.ci95_low, s.ci95_high, s.cv, s.iqr) == (7.0, 7.0, 0.0, 0.0)


def test_one_window_has_no_spread():
    s = summarize([42.0])
    assert s.median == 42.0 and s.cv is None and s.ci95_low is None and s.ci95_high is None


def test_empty_is_refused():
    with pytest.raises(ValueError):
        summarize([])


def test_olympic_mean_drops_one_min_and_one_max():
    assert olympic_mean([1.0, 2.0, 3.0, 4.0, 100.0]) == 3.0
    assert olympic_mean([5.0, 1.0, 1.0, 9.0, 9.0, 3.0]) == pytest.approx((1 + 3 + 5 + 9) / 4)
    with pytest.raises(ValueError):
        olympic_mean([1.0, 2.0, 3.0, 4.0])


def test_across_runs_uses_olympic_mean_from_five_runs():
    assert across_runs([1.0, 2.0, 3.0, 4.0, 100.0])["centre"] == 3.0
    four = across_runs([1.0, 2.0, 3.0, 6.0])
    assert four["method"] == "mean" and four["centre"] == 3.0
    assert four["cv"] == pytest.approx(np.std([1, 2, 3, 6], ddof=1) / 3.0)
