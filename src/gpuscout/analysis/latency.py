"""Latency statistics of inference requests, and the batch size a latency target allows.

Percentiles are nearest-rank (the smallest value with at least p% of the requests at or below it;
numpy's "inverted_cdf"), so every reported latency is one a request really had; p99 of fewer than
100 requests is the maximum, and the summary says how many requests it rests on.
"""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 99)
TARGET_PERCENTILE = "p99_ms"  # what --latency-target-ms is held against: the common serving SLO


def percentile(values: list[float], p: float) -> float:
    if not values:
        raise ValueError("no latencies to summarise")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize_latency(latencies_s: list[float]) -> dict:
    ms = [v * 1000 for v in latencies_s]
    out = {"count": len(ms), "mean_ms": float(np.mean(ms)), "min_ms": min(ms), "max_ms": max(ms)}
    out.update({f"p{p}_ms": percentile(ms, p) for p in PERCENTILES})
    return out


def best_batch(points: list[dict], target_ms: float) -> tuple[dict | None, dict | None]:
    """(the highest-throughput point whose p99 meets the target, the point with the lowest p99).
    `points`: {"batch_size", "samples_per_s", "latency": summarize_latency(...)}."""
    if not points:
        return None, None
    meeting = [p for p in points if p["latency"][TARGET_PERCENTILE] <= target_ms]
    fastest = min(points, key=lambda p: p["latency"][TARGET_PERCENTILE])
    return (max(meeting, key=lambda p: p["samples_per_s"]) if meeting else None), fastest
