"""Achieved TFLOP/s and model FLOPs utilisation (MFU), as nanoGPT's estimate_mfu does:
analytic training FLOPs per sample x samples/s, over the GPU's dense peak for the precision."""

from __future__ import annotations

from gpuscout.catalog import GpuSpec
from gpuscout.core.spec import Precision


def achieved_tflops(training_flops_per_sample: float, samples_per_s: float) -> float:
    return training_flops_per_sample * samples_per_s / 1e12


def mfu(achieved: float, gpu: GpuSpec | None, precision: Precision) -> tuple[float | None, float | None, str | None]:
    """(mfu, peak_tflops, peak_path); all None for a GPU not in the catalog or a missing path."""
    if gpu is None:
        return None, None, None
    peak, path = gpu.peak_tflops(precision)
    if peak is None:
        return None, None, path
    return achieved / peak, peak, path
