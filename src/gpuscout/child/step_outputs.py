"""What one call of Keras' train_function returned: its logs, a wait for the device to finish that
step, each log value as the record keeps it, and the step's loss."""

from __future__ import annotations


def step_logs(outputs):
    """What a train_function call returned, its logs: jax's returns (logs, state)."""
    return outputs[0] if isinstance(outputs, tuple) and len(outputs) == 2 else outputs


def wait_for(outputs) -> None:
    """Block until the step that made `outputs` has finished on the device."""
    leaf = outputs
    while isinstance(leaf, (dict, list, tuple)) and leaf:
        leaf = next(iter(leaf.values())) if isinstance(leaf, dict) else leaf[0]
    if hasattr(leaf, "block_until_ready"):
        leaf.block_until_ready()
    elif hasattr(leaf, "numpy"):
        leaf.numpy()


# A custom metric's array is kept whole up to this many numbers (a per-class score, a small
# confusion matrix); a larger one, and anything that is not a number, is kept as its text, cut here.
LOG_ARRAY_ITEMS = 1024


LOG_TEXT_CHARS = 200


def log_value(value):
    """One value of fit's logs as the event (and the record) keeps it: a number as a float, NaN and
    infinities included (a diverging training is data); an array as nested lists of them; anything
    else as its text."""
    try:
        import numpy as np

        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if array.dtype.kind in "biuf":
            if array.ndim == 0:
                return float(array)
            if array.size <= LOG_ARRAY_ITEMS:
                return array.astype(float).tolist()
    except Exception:
        pass
    return str(value)[:LOG_TEXT_CHARS]


def last_loss(outputs) -> float | None:
    """The loss of the last step run (what `tune` compares at equal steps); None when the step's
    logs hold none."""
    try:
        logs = outputs if isinstance(outputs, dict) else None
        if logs is None or "loss" not in logs:
            return None
        return float(logs["loss"])
    except Exception:
        return None
