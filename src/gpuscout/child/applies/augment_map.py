"""augment_map: the tf.data map at the FILE:LINE the plan names left out where the script wrote it
(child/tf_data.py builds the pipeline without it), and the model trained behind the layers that
do its work on the device, as augment_in_model wraps it (the same wrapper)."""

from __future__ import annotations

import os

from gpuscout.child import tf_data, tune_state
from gpuscout.child.applies.augment_in_model import can_wrap, wrap
from gpuscout.child.applies.call import FitCall
from gpuscout.child.fit_input import input_type

# Its place in the hooks it defines (child/applies): beside the other augmentation moves: out of the map before the
# pipeline is changed
ORDER = 32


def fit_input(fit: FitCall) -> None:
    moved, model = tune_state.SETTINGS.augment_map, fit.model
    if not moved or moved.get("at") not in tf_data.SKIPPED or input_type(fit.x) != "tf.data":
        return
    if not can_wrap(model):
        # the map is already gone from the pipeline: training on without its layers would be another
        # training, called a speed-up; the run fails with why instead
        raise RuntimeError(
            f"gpuscout tune (augment_map): the map at {moved['at']} was left out, but the model fit trains was not "
            "compiled where the run saw it, so its augmentation cannot be put in front of it"
        )
    wrap(model)
    file, _, line = str(moved["at"]).rpartition(":")
    layers = moved.get("layers") or []
    tune_state.applied(
        "augment_map",
        f"the map at {os.path.basename(file)}:{line} left out; the model behind "
        + ", ".join(str(layer["name"]) for layer in layers if isinstance(layer, dict)),
    )
