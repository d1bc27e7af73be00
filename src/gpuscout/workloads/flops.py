"""Count a built Keras model's forward FLOPs per sample (runs in the child, or in tests).

Convention (workloads/base.py): 2 FLOPs per multiply-add; convolutions, dense layers and
layers that declare their own matrix work (``forward_flops_per_sample()``, e.g. self-attention);
batch norm, layer norm, activations, pooling and the loss are left out.
"""

from __future__ import annotations

import math


def _per_sample(shape) -> int:
    return math.prod(int(d) for d in shape[1:])


def forward_flops_per_sample(model) -> int:
    total = 0
    for layer in _leaf_layers(model):
        kind = type(layer).__name__
        if hasattr(layer, "forward_flops_per_sample"):
            total += int(layer.forward_flops_per_sample())
        elif kind in ("Conv1D", "Conv2D", "Conv3D"):
            kernel = layer.kernel.shape  # (*spatial, in/groups, out)
            macs_per_output = math.prod(int(d) for d in kernel[:-1])
            total += 2 * _per_sample(layer.output.shape) * macs_per_output
        elif kind == "DepthwiseConv2D":
            kernel = layer.kernel.shape  # (kh, kw, in, multiplier)
            total += 2 * _per_sample(layer.output.shape) * int(kernel[0]) * int(kernel[1])
        elif kind == "Dense":
            fan_in = int(layer.kernel.shape[0])
            total += 2 * _per_sample(layer.output.shape) * fan_in
    return total


def _leaf_layers(model):
    """Layers of a (nested) functional model; a layer that counts itself is not opened."""
    for layer in model.layers:
        if getattr(layer, "layers", None) and not hasattr(layer, "forward_flops_per_sample"):
            yield from _leaf_layers(layer)
        else:
            yield layer
