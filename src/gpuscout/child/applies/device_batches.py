"""device_batches: in-memory arrays given to fit on jax handed to it as device slices."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall

# Its place in the hooks it defines (child/applies): the arrays, at their batch, moved to the device and sliced there
ORDER = 80


def fit_input(fit: FitCall) -> None:
    if tune_state.SETTINGS.device_batches:
        fit.args, fit.kwargs = _device_slices(fit.args, fit.kwargs)


def _device_slices(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """In-memory arrays given to fit on jax handed to it as device slices (fixes.device_slices;
    keras' array_slicing otherwise gathers each batch on the host: on an H100 a ResNet-50 fed that
    way ran 1.62x slower, docs/benchmarks.md): the same batches in the same order, fit's shuffle
    kept, so the same training (tune/same_training.py checks it). Left alone where fit weighs its
    samples or splits off its own validation, which the slices would not do."""
    import keras

    x = args[0] if args else kwargs.get("x")
    y = args[1] if len(args) > 1 else kwargs.get("y")
    if (
        keras.backend.backend() != "jax"
        or y is None
        or len(args) > 2
        or kwargs.get("validation_split")
        or kwargs.get("sample_weight") is not None
        or kwargs.get("class_weight") is not None
        or not hasattr(x, "shape")
        or not hasattr(y, "shape")
    ):
        return args, kwargs
    from gpuscout.child.fixes import device_slices

    batch = int(kwargs.get("batch_size") or 32)
    shuffle = kwargs.get("shuffle", True)
    steps = -(-len(x) // batch)  # fit's own count: the last batch partial
    kwargs = {k: v for k, v in kwargs.items() if k not in ("x", "y", "batch_size", "shuffle")}
    kwargs.setdefault("steps_per_epoch", steps)
    if kwargs.get("validation_data") is not None:  # validated at fit's batch, as before (its default: batch_size)
        kwargs.setdefault("validation_batch_size", batch)
    tune_state.applied(
        "device_batches",
        f"fit(device_slices(x, y, {batch}, shuffle={shuffle!r}), steps_per_epoch={steps}"
        + (f", validation_batch_size={kwargs['validation_batch_size']}" if "validation_batch_size" in kwargs else "")
        + "): the arrays put on the device once, each batch sliced there",
    )
    return (device_slices(x, y, batch, shuffle),), kwargs
