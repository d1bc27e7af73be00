"""augment_in_model: the PyDataset's per-image function made to return its image as given, and
the model trained behind the layers that do its work on the device, compiled as the script
compiled its model."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall
from gpuscout.child.watch_state import is_pydataset

# Its place in the hooks it defines (child/applies): the augmentation moved out of the dataset before it is sent to
# worker processes
ORDER = 30

# By id(model), not on the model: an attribute of a Keras model is tracked, and a wrapper kept on
# the model it wraps makes each the other's layer (building it then recursed without end)
_compiled_with: dict[int, tuple] = {}  # compile's arguments


_augmenting: dict[int, object] = {}  # the model that wraps it behind the layers (None until made)


def moved() -> dict | None:
    """The augmentation moved into the model: a function's (augment_in_model), __getitem__'s own
    lines' (augment_inline, child/applies/augment_inline.py) or a tf.data map's (augment_map,
    child/applies/augment_map.py); each gives the input shape and layers."""
    settings = tune_state.SETTINGS
    return settings.augment_in_model or settings.augment_inline or settings.augment_map


def remember_compile(model, args: tuple, kwargs: dict) -> None:
    """compile's arguments, kept where the model is trained behind augmentation layers: the
    model that wraps it is compiled with them (the same optimizer, loss and metrics objects)."""
    if moved():
        _compiled_with[id(model)] = (args, dict(kwargs))


def wrap(model) -> None:
    """fit trains `model` behind the moved augmentation's layers from now on (made at first use)."""
    _augmenting[id(model)] = None


def can_wrap(model) -> bool:
    """Whether the script compiled `model` where it was seen (the wrapper is compiled as it was)."""
    return id(model) in _compiled_with


def augments(model) -> bool:
    """fit trains `model` behind the layers that do the PyDataset's augmentation."""
    return id(model) in _augmenting or any(w is model for w in _augmenting.values())


def model_for_fit(model):
    """The model fit trains: the script's own, or, where the PyDataset's augmentation was moved
    (fit_input), keras.Sequential([Input, *layers, model]) compiled as the script compiled its
    model: what the patch writes before the script's compile. Made once per model."""
    if id(model) not in _augmenting:
        return model
    if _augmenting[id(model)] is None:
        import keras

        settings = moved()
        assert settings is not None  # wrap() is called only where a change moved the augmentation
        from gpuscout.child import fixes

        layers = [
            (getattr(keras.layers, layer["name"], None) or getattr(fixes, layer["name"]))(
                *layer["args"], **layer["kwargs"]
            )
            for layer in settings["layers"]
        ]
        wrapper = keras.Sequential(
            [keras.Input(shape=tuple(settings["input_shape"])), *layers, model], name=f"{model.name}_augmenting"
        )
        args, kwargs = _compiled_with[id(model)]
        wrapper.compile(*args, **kwargs)
        wrapper.run_eagerly = model.run_eagerly  # a debugging setting made after compile stays the script's
        wrapper._gpuscout_compiled_at = getattr(model, "_gpuscout_compiled_at", None)
        _augmenting[id(model)] = wrapper
    return _augmenting[id(model)]


def fit_input(fit: FitCall) -> None:
    function, x, model = tune_state.SETTINGS.augment_in_model, fit.x, fit.model
    if function and is_pydataset(x) and can_wrap(model):
        from gpuscout.child.sample_work import move_into_model

        where = move_into_model(x, function)
        wrap(model)
        tune_state.applied(
            "augment_in_model",
            f"{where} returns its {function['argument']} as given; the model behind "
            + ", ".join(layer["name"] for layer in function["layers"]),
        )
