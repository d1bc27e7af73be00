"""Hyperparameter sweeps (`gpuscout sweep`), and what a trial script calls to report its metrics.

In your training script::

    import gpuscout.sweep
    gpuscout.sweep.report(val_accuracy=0.91, val_loss=0.3, step=epoch)   # any time, any number of times
    model.fit(..., callbacks=[gpuscout.sweep.keras_callback()])          # or: every epoch's logs

Outside a sweep both do nothing, so the script runs unchanged on its own. A script may instead
print one JSON object per line (`{"val_accuracy": 0.91}`): gpuscout reads those too.
"""

from __future__ import annotations

import json
import os
import time

TRIAL_FILE_ENV = "GPUSCOUT_TRIAL_FILE"


def report(step: int | None = None, **metrics: float) -> None:
    """Append one report (metrics at a step) to this trial's file; a no-op outside a sweep."""
    path = os.environ.get(TRIAL_FILE_ENV)
    if not path:
        return
    entry = {"time": time.time(), **({"step": step} if step is not None else {}),
             **{k: float(v) for k, v in metrics.items()}}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def keras_callback():
    """A Keras callback that reports every epoch's logs (loss, metrics, val_*) with the epoch."""
    import keras

    class SweepReporter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            report(step=epoch + 1, **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

    return SweepReporter()
