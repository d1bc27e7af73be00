"""What the record keeps about a built model, read inside the child (Keras imported)."""

from __future__ import annotations


def model_details(model, keras) -> dict:
    """What the scaling analysis needs to know about a model: its parameters (the all-reduce
    size) and its batch-normalisation layers (statistics over the batch: shared across devices
    under keras.distribution.DataParallel, per device under tf.distribute)."""
    return {"params": int(model.count_params()),
            "batchnorm_layers": sum(isinstance(layer, keras.layers.BatchNormalization)
                                    for layer in model._flatten_layers())}
