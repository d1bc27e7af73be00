"""Hyperparameter sweeps (`gpuscout sweep`), and what a trial script calls to report its metrics.

In your training script::

    import gpuscout.sweep
    gpuscout.sweep.report(val_accuracy=0.91, val_loss=0.3, step=epoch)   # any time, any number of times
    model.fit(..., callbacks=[gpuscout.sweep.keras_callback()])          # or: every epoch's logs

Outside a sweep both do nothing, so the script runs unchanged on its own. A script may instead
print one JSON object per line (`{"val_accuracy": 0.91}`): gpuscout reads those too.

With `early_stop` in the sweep file, `report(..., step=epoch)` returns True when the pruner stops
the trial there: end the training loop and let the script finish (keras_callback does it for fit).
A script that prints JSON lines with a "step" or "epoch" is stopped instead.
"""

from __future__ import annotations

import json
import os
import time

from gpuscout.core import decisions, events

TRIAL_FILE_ENV = "GPUSCOUT_TRIAL_FILE"


def report(step: int | None = None, **metrics: float) -> bool:
    """Append one report (metrics at a step) to this trial's file; a no-op outside a sweep. True
    when the sweep's pruner stops the trial at this step (early_stop): stop training."""
    path = os.environ.get(TRIAL_FILE_ENV)
    if not path:
        return False
    entry = {
        "time": time.time(),
        **({"step": step} if step is not None else {}),
        **{k: _reported(v) for k, v in metrics.items()},
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
    if step is None or not decisions.enabled():
        return False
    try:  # to the driver through the trial's event channel, then wait for the pruner's verdict
        events.emit(
            {
                "event": "sweep_report",
                "pid": os.getpid(),
                "step": int(step),
                "metrics": {k: _reported(v) for k, v in metrics.items()},
            }
        )
    except Exception:  # no channel in this process: no verdict will come
        return False
    return decisions.wait_for(f"report-{int(step)}") == "stop"


def _reported(value):
    """A reported value as the trial's file keeps it: a number (a tensor's or numpy's too) as a
    float, NaN included; anything else as its text, never an exception in the user's script."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)[:200]


def keras_callback():
    """A Keras callback that reports every epoch's logs (loss, metrics, val_*) with the epoch,
    and ends fit when the sweep's pruner stops the trial."""
    import keras

    class SweepReporter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if report(step=epoch + 1, **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}):
                self.model.stop_training = True

    return SweepReporter()
