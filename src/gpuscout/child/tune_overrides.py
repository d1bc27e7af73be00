"""Inside a script run by `gpuscout tune -- COMMAND`: one change applied to the unchanged script.

gpuscout passes the change in GPUSCOUT_TUNE (core/tune_settings.py's TuneSettings, as JSON)
beside watch's own settings; the watch hook (child/watch_hook.py) calls these functions where
Keras gives them a place, before the first layer is built (the precision policy), at
`Model.compile` (XLA, steps_per_execution) and at `Model.fit` (the input, the batch), and each
calls every change's applier (child/applies/, one module per change) in the hook's order.
Nothing in a file changes. What was applied goes to the parent as a `watch_applied` event
(child/tune_state.py), so the record says what really ran; a change that finds nothing to apply
to (no PyDataset for workers) says so instead.

Only the standard library, Keras and the frameworks are imported here, and those lazily.
"""

from __future__ import annotations

from gpuscout.child import applies, tune_state
from gpuscout.child.applies import augment_in_model
from gpuscout.child.applies.call import FitCall


def wanted() -> bool:
    """Whether this run applies any change (a plain watch applies none)."""
    return bool(tune_state.SETTINGS)


def on_keras(keras_module_loaded) -> None:
    """Keras' model module has just been executed: no layer exists yet."""
    for change in applies.ON_KERAS:
        change.on_keras()


def compile_kwargs(kwargs: dict) -> dict:
    for change in applies.COMPILE:
        kwargs = change.compile_kwargs(kwargs)
    return kwargs


def fit_input(args: tuple, kwargs: dict, model=None) -> tuple[tuple, dict]:
    """The input fit reads, changed as asked: a PyDataset's workers, a tf.data dataset's prefetch,
    a generator drained by a prefetching thread, the batch size of in-memory arrays (and the
    model's learning rate scaled for it)."""
    fit = FitCall(args, kwargs, model)
    for change in applies.FIT:
        change.fit_input(fit)
    return fit.args, fit.kwargs


# what the watch hook asks of the model fit trains (augment_in_model's: the script's, or the model
# behind the augmentation layers)
remember_compile = augment_in_model.remember_compile
model_for_fit = augment_in_model.model_for_fit
augments = augment_in_model.augments
