"""Latency statistics on exact values, the latency-target choice, and inference input checks."""

import pytest

from gpuscout.analysis.latency import best_batch, percentile, summarize_latency
from gpuscout.core.errors import UsageError
from gpuscout.infer import check_format, parse_batch_sizes


def test_nearest_rank_percentiles_are_latencies_that_happened():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50 and percentile(values, 90) == 90 and percentile(values, 99) == 99
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([5.0, 1.0], 99) == 5.0  # fewer than 100 requests: p99 is the maximum
    assert percentile([7.0], 50) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary_in_milliseconds():
    s = summarize_latency([0.001, 0.002, 0.003, 0.004, 0.010])
    assert s["count"] == 5 and s["p50_ms"] == pytest.approx(3.0) and s["p90_ms"] == pytest.approx(10.0)
    assert s["p99_ms"] == pytest.approx(10.0) and s["min_ms"] == pytest.approx(1.0)
    assert s["mean_ms"] == pytest.approx(4.0)


def _point(batch, rate, p99):
    return {"batch_size": batch, "samples_per_s": rate, "latency": {"p99_ms": p99}}


def test_the_target_picks_the_fastest_batch_within_it_or_says_the_lowest():
    points = [_point(1, 100, 2.0), _point(8, 700, 5.0), _point(64, 3000, 30.0)]
    best, lowest = best_batch(points, 10.0)
    assert best["batch_size"] == 8 and lowest["batch_size"] == 1
    best, lowest = best_batch(points, 1.0)
    assert best is None and lowest["latency"]["p99_ms"] == 2.0
    assert best_batch(points, 100.0)[0]["batch_size"] == 64


def test_batch_sizes_and_formats_are_checked():
    assert parse_batch_sizes("32,1,8") == (1, 8, 32)
    for bad in ("0,8", "-1", "", "a,b", "32,1,8,8"):
        with pytest.raises(UsageError, match="--batch-sizes"):
            parse_batch_sizes(bad)
    assert check_format("litert").value == "litert"
    with pytest.raises(UsageError, match="unknown --model-format 'tflite'"):
        check_format("tflite")
