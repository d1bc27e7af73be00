"""How a run's configuration reads, and the numbers' formats (gpuscout.core.units) under the
report's name for them."""

from __future__ import annotations

from gpuscout.core.units import (  # noqa: F401  (the report's names)
    DASH,
    about,
    bytes_,
    number,
    percent,
    reading,
    seconds,
    usd,
)
from gpuscout.record.run import RunRecord


def config(r: RunRecord) -> str:
    """A run's backend, precision and (tensorflow only: jax always compiles) XLA setting; for an
    inference run, its format (and LiteRT variant) instead of the training settings."""
    backend, precision = r.backend.value, r.precision.value
    if r.inference is not None:
        if r.inference.format == "litert":
            return f"litert {r.inference.variant} (cpu)"
        xla = "" if backend == "jax" or r.inference.format != "keras" else (" xla" if r.xla else " no-xla")
        return f"{r.inference.format} {backend} {precision}{xla} infer"
    xla = "" if backend == "jax" else (" xla" if r.xla else " no-xla")
    return f"{backend} {precision}{xla}"
