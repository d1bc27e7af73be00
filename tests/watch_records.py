"""Watched runs' telemetry made by hand: a GPU and its busy samples."""

from __future__ import annotations

from gpuscout.record.run import GpuInfo, TelemetrySample

H100 = GpuInfo(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    memory_total_bytes=80 * 2**30,
    compute_capability="9.0",
    sm_clock_max_mhz=1980,
)


def busy(util: float, start: float = 999.0, n: int = 60, memory: int = 30 * 2**30) -> list[TelemetrySample]:
    """10 Hz samples at `util` % covering the synthetic windows (1000 s to 1003 s)."""
    return [
        TelemetrySample(
            t_monotonic_s=start + i * 0.1, gpu_util_pct=util, memory_used_bytes=memory, sm_clock_mhz=1980, power_w=500.0
        )
        for i in range(n)
    ]
