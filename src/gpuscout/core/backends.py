"""What the parent knows about backends without importing them.

The child-side code of each backend (``gpuscout.child.jax_steps``, ``gpuscout.child.tensorflow_steps``)
is imported only inside the worker process, after ``KERAS_BACKEND`` is set.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Backend, Precision

# `--backend auto` picks the first installed, in this order (DESIGN.md).
AUTO_ORDER = (Backend.tensorflow, Backend.jax)

# The import name that proves a backend is installed, and the extra that installs it.
_MODULE = {Backend.tensorflow: "tensorflow", Backend.jax: "jax"}
INSTALL_HINT = {
    Backend.tensorflow: "pip install 'gpuscout[tensorflow]' (CPU) or 'gpuscout[gpu]' (with CUDA)",
    Backend.jax: "pip install 'gpuscout[jax]' (CPU) or 'gpuscout[jax-gpu]' (with CUDA)",
}

# Keras 3 runs every precision policy on both backends; mixed_float16 adds loss scaling
# (keras.optimizers.LossScaleOptimizer, applied by model.compile).
PRECISIONS = {
    Backend.tensorflow: (Precision.fp32, Precision.mixed_float16, Precision.mixed_bfloat16),
    Backend.jax: (Precision.fp32, Precision.mixed_float16, Precision.mixed_bfloat16),
}


def is_installed(backend: Backend) -> bool:
    return importlib.util.find_spec(_MODULE[backend]) is not None and importlib.util.find_spec("keras") is not None


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """A version's major and minor numbers ("12.5.1" -> (12, 5), "13" -> (13,)); None when not numbers."""
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return None


def installed_release(distribution: str) -> tuple[int, ...] | None:
    """An installed distribution's major and minor version, read from its metadata (not imported)."""
    try:
        return version_tuple(importlib.metadata.version(distribution))
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> list[Backend]:
    return [b for b in AUTO_ORDER if is_installed(b)]


def resolve(name: str) -> Backend:
    """Turn `--backend auto|tensorflow|jax` into an installed Backend, or raise UsageError."""
    if name == "auto":
        found = installed()
        if not found:
            raise UsageError("no backend installed: pip install 'gpuscout[tensorflow]' or 'gpuscout[jax]'")
        return found[0]
    try:
        backend = Backend(name)
    except ValueError:
        raise UsageError(f"unknown backend {name!r}: choose auto, tensorflow or jax") from None
    if not is_installed(backend):
        raise UsageError(f"backend {backend.value!r} is not installed: {INSTALL_HINT[backend]}")
    return backend


def parse_precision(precision: str, what: str = "precision") -> Precision:
    """A precision by name; UsageError naming `what` (the option) and the choices otherwise."""
    try:
        return Precision(precision)
    except ValueError:
        raise UsageError(f"unknown {what} {precision!r}: choose {', '.join(p.value for p in Precision)}") from None


def check_precision(backend: Backend, precision: str) -> Precision:
    value = parse_precision(precision)
    if value not in PRECISIONS[backend]:
        allowed = ", ".join(p.value for p in PRECISIONS[backend])
        raise UsageError(f"the {backend.value} backend cannot run {value.value}: choose {allowed}")
    return value
