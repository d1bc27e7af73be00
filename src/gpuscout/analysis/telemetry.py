"""Summarising telemetry samples over the child's timing windows."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.record.child import ChildWindow
from gpuscout.record.run import Telemetry, TelemetrySample
from gpuscout.telemetry.nvml import slowdown_names


def _values(samples: list[TelemetrySample], name: str) -> list[float]:
    return [getattr(s, name) for s in samples if getattr(s, name) is not None]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_telemetry(
    samples: list[TelemetrySample],
    windows: Sequence[ChildWindow],
    samples_measured: int,
    interval_s: float,
    index: int | str | None = None,
) -> Telemetry:
    """Figures over the samples that fall inside a timing window (warm-up and compile excluded)."""
    inside = [s for s in samples if any(w.start_monotonic_s <= s.t_monotonic_s <= w.end_monotonic_s for w in windows)]
    measured_s = sum(w.end_monotonic_s - w.start_monotonic_s for w in windows)
    power = _values(inside, "power_w")
    power_mean = _mean(power)
    reasons: set[str] = set()
    for s in inside:
        reasons.update(slowdown_names(s.clock_event_reasons))
    energy_j = power_mean * measured_s if power_mean is not None else None
    clocks = _values(inside, "sm_clock_mhz")
    temps = _values(inside, "temperature_c")
    memory = _values(samples, "memory_used_bytes")
    return Telemetry(
        index=index,
        interval_s=interval_s,
        sample_count=len(samples),
        window_sample_count=len(inside),
        gpu_util_mean_pct=_mean(_values(inside, "gpu_util_pct")),
        memory_util_mean_pct=_mean(_values(inside, "memory_util_pct")),
        power_mean_w=power_mean,
        power_max_w=max(power) if power else None,
        energy_j=energy_j,
        energy_j_per_1000_samples=(
            1000 * energy_j / samples_measured if energy_j is not None and samples_measured else None
        ),
        sm_clock_mean_mhz=_mean(clocks),
        sm_clock_min_mhz=min(clocks) if clocks else None,
        temperature_max_c=max(temps) if temps else None,
        memory_used_max_bytes=int(max(memory)) if memory else None,
        slowdown_reasons=sorted(reasons),
        samples=samples,
    )


def combine_telemetry(per_gpu: list[Telemetry]) -> Telemetry:
    """One summary for a run on several GPUs, in the same fields as one GPU's: power and energy
    summed (what the run draws and costs), utilisation and clocks averaged, the worst temperature
    and memory, every slowdown reason seen. Each GPU's own summary stays in the record beside it."""

    def known(name: str) -> list[float]:
        return [getattr(t, name) for t in per_gpu if getattr(t, name) is not None]

    def total(name: str) -> float | None:
        values = known(name)
        return sum(values) if len(values) == len(per_gpu) else None  # a partial sum would mislead

    clocks_min = known("sm_clock_min_mhz")
    temps, memory = known("temperature_max_c"), known("memory_used_max_bytes")
    return Telemetry(
        gpus=len(per_gpu),
        interval_s=per_gpu[0].interval_s,
        sample_count=sum(t.sample_count for t in per_gpu),
        window_sample_count=min(t.window_sample_count for t in per_gpu),
        gpu_util_mean_pct=_mean(known("gpu_util_mean_pct")),
        memory_util_mean_pct=_mean(known("memory_util_mean_pct")),
        power_mean_w=total("power_mean_w"),
        power_max_w=total("power_max_w"),  # an upper bound: the GPUs' peaks need not coincide
        energy_j=total("energy_j"),
        energy_j_per_1000_samples=total("energy_j_per_1000_samples"),
        sm_clock_mean_mhz=_mean(known("sm_clock_mean_mhz")),
        sm_clock_min_mhz=min(clocks_min) if clocks_min else None,
        temperature_max_c=max(temps) if temps else None,
        memory_used_max_bytes=max(memory) if memory else None,  # per GPU: what must fit on each
        slowdown_reasons=sorted({r for t in per_gpu for r in t.slowdown_reasons}),
        samples=[],  # per GPU, in the record's telemetry_per_gpu
    )
