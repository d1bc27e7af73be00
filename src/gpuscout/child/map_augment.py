"""What a tf.data `map` of the script's does to the images it is given, told as Keras layers
(issue 77, the third form: augmentation in a tf.data map, where the TensorFlow guides put it).

tf.data runs a map's function on the host, element by element (in parallel where the script asks),
and on a GPU whose step is short the host cannot keep up. The same flips, crops, shifts and
rescales as layers in the model run on the device, for the batch at once, inside the compiled
step. tune's probe (its first baseline, after the timed steps) takes one element of the dataset
the map reads, calls the map's function on it again TRIES times, eagerly, and tells the images it
returns against the one it was given (child/augment_match.identify); the rest of the element (the
label, a weight) must come back as given, or nothing moves. The change then builds the pipeline
without that map (child/tf_data.py, where the script wrote it) and trains the model behind the
layers (child/applies/augment_in_model.py's wrapper).

Only the standard library and numpy are imported here; TensorFlow is already loaded (a dataset
exists) and imported where it is used.
"""

from __future__ import annotations

import numpy as np

from gpuscout.child import augment_match

# An image: height, width, channels; or a batch of them (a map after batch())
IMAGE_RANKS = (3, 4)


def tell(function, before) -> dict:
    """The facts of the map `function` over the dataset `before` (its input): the layers that do
    what it does to the element's image, or why none do; as record.watch.MapAugment holds them."""
    import tensorflow as tf

    facts: dict = {"function": getattr(function, "__qualname__", None) or type(function).__name__}
    try:
        element = next(iter(before.take(1)))
    except (StopIteration, tf.errors.OpError) as exc:
        return {**facts, "why_not": f"its input made no element to call it on ({type(exc).__name__})"}
    parts = element if isinstance(element, tuple) else (element,)
    if isinstance(element, dict) or not parts:
        return {**facts, "why_not": "its elements are not an image and its labels (a dict of features)"}
    image = parts[0]
    if not hasattr(image, "shape") or len(image.shape) not in IMAGE_RANKS or not image.dtype.is_numeric:
        shape = tuple(image.shape) if hasattr(image, "shape") else type(image).__name__
        return {**facts, "why_not": f"its input's first part is not an image (height, width, channels): {shape}"}
    one = image.shape[1:] if len(image.shape) == 4 else image.shape  # the model's input: one image
    facts.update(input_shape=[int(d) for d in one], input_dtype=image.dtype.name, batched=len(image.shape) == 4)

    def call():
        out = function(*parts) if isinstance(element, tuple) else function(element)
        return out if isinstance(out, tuple) else (out,)

    first = call()
    if len(first) != len(parts):
        return {**facts, "why_not": f"it makes {len(first)} part(s) of an element from {len(parts)}"}
    for index, (given, made) in enumerate(zip(parts[1:], first[1:]), start=2):
        if not _same(given, made):
            return {
                **facts,
                "why_not": f"it changes the element's part {index} (a label or weight), not the image alone",
            }
    layers, explained = augment_match.identify(lambda: np.asarray(call()[0]), np.asarray(image))
    return {**facts, "explained": explained, **augment_match.as_record(layers)}


def _same(a, b) -> bool:
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (TypeError, ValueError):
        return False
    return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))
