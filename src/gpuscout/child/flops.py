"""Count a built Keras model's forward FLOPs per sample (runs in the child, or in tests).

Convention (workloads/base.py): 2 FLOPs per multiply-add; convolutions, dense and einsum-dense
layers, the two attention products of Keras' MultiHeadAttention, and layers that declare their
own matrix work (``forward_flops_per_sample()``, e.g. gpuscout's self-attention). Embeddings
(lookups) and normalisation layers count as zero by the same convention; activations, pooling
and the loss are left out. Layers of other kinds, or whose shapes are not known, are not
counted: `count_with_coverage` says which share of the FLOPs the count covers (at most).
"""

from __future__ import annotations

import math

ZERO_FLOP_LAYERS = {
    "Embedding",
    "BatchNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "RMSNormalization",
    "UnitNormalization",
}
CONV_LAYERS = {"Conv1D", "Conv2D", "Conv3D"}


def forward_flops_per_sample(model) -> int:
    return int(count_with_coverage(model)[0])


def count_with_coverage(model) -> tuple[float, float | None]:
    """(forward FLOPs per sample, the counted share of them). A layer that cannot be counted (a
    kind this module does not know, or a shape it cannot see) does at least one multiply-add per
    weight per sample: 2 x its weights is the least it adds, so the share is an upper bound.
    (A share of weights, as before, called a text classifier 92% counted when its Embedding held
    most weights and its convolutions most FLOPs.)"""
    total, missed = 0.0, 0.0
    for layer in _leaf_layers(model):
        flops = _layer_flops(layer)
        if flops is None:
            missed += 2.0 * _weights(layer)
            continue
        total += flops
    if total + missed == 0:
        return total, None
    return total, total / (total + missed)


def _weights(layer) -> int:
    return sum(math.prod(int(d) for d in w.shape) for w in layer.trainable_weights)


def _leaf_layers(layer):
    """Every layer inside `layer` that does matrix work or holds weights; a layer that counts
    itself is not opened."""
    for child in layer._flatten_layers(include_self=False, recursive=False):
        if hasattr(child, "forward_flops_per_sample"):
            yield child
            continue
        if type(child).__name__ == "MultiHeadAttention":
            yield child  # the attention products and the output projection (whose input is
            # built with an unknown length); then its query, key and value projections
            yield from (p for p in (child._query_dense, child._key_dense, child._value_dense) if p is not None)
        elif child._flatten_layers(include_self=False, recursive=False):
            yield from _leaf_layers(child)
        else:
            yield child


def _per_sample(shape) -> int | None:
    dims = tuple(shape)[1:]
    if any(d is None for d in dims):
        return None
    return math.prod(int(d) for d in dims)


def _output_shape(layer):
    try:
        return tuple(layer.output.shape)  # a layer of a functional model
    except (AttributeError, ValueError):
        pass
    shapes = getattr(layer, "_build_shapes_dict", None)  # a layer built inside another
    if shapes and len(shapes) == 1:
        return tuple(layer.compute_output_shape(next(iter(shapes.values()))))
    return None


def _layer_flops(layer) -> float | None:
    kind = type(layer).__name__
    if hasattr(layer, "forward_flops_per_sample"):
        return float(layer.forward_flops_per_sample())
    if any(k.__name__ in ZERO_FLOP_LAYERS for k in type(layer).__mro__):  # subclasses too
        return 0.0
    if kind == "MultiHeadAttention":
        return _attention_products(layer)
    if kind == "EinsumDense":
        return _einsum_dense(layer)
    if kind not in CONV_LAYERS | {"DepthwiseConv2D", "Dense"}:
        return None if layer.trainable_weights else 0.0
    shape = _output_shape(layer)
    outputs = _per_sample(shape) if shape is not None else None
    if outputs is None:
        return None
    kernel = tuple(int(d) for d in layer.kernel.shape)
    if kind in CONV_LAYERS:  # kernel (*spatial, in/groups, out): MACs per output element
        return 2.0 * outputs * math.prod(kernel[:-1])
    if kind == "DepthwiseConv2D":  # kernel (kh, kw, in, multiplier)
        return 2.0 * outputs * kernel[0] * kernel[1]
    return 2.0 * outputs * kernel[0]  # Dense: fan-in MACs per output element


def _built_input_shape(layer):
    shapes = getattr(layer, "_build_shapes_dict", None)
    return tuple(next(iter(shapes.values()))) if shapes and len(shapes) == 1 else None


def _einsum_dense(layer) -> float | None:
    """2 x the product of every index's size but the batch's: an einsum's multiply-adds."""
    shape = _built_input_shape(layer)
    if shape is None:
        return None
    data, kernel_spec, _ = layer.equation.replace(" ", "").split("->")[0].split(",") + [None]
    sizes = dict(zip(kernel_spec, (int(d) for d in layer.kernel.shape)))
    if data.startswith("..."):  # the leading axes the ellipsis stands for: batch, then more
        explicit = data[3:]
        leading = shape[: len(shape) - len(explicit)]
        extra = leading[1:]
        shape_letters = dict(zip(explicit, shape[len(leading) :]))
    else:
        extra = ()
        shape_letters = dict(zip(data[1:], shape[1:]))
    sizes.update(shape_letters)
    if any(d is None for d in (*extra, *sizes.values())):
        return None
    return 2.0 * math.prod(int(d) for d in extra) * math.prod(int(d) for d in sizes.values())


def _attention_products(layer) -> float | None:
    """Q.K^T and A.V, 2.Tq.Tk.H.(dk + dv), and the output projection, 2.Tq.H.dv.d_out, per sample
    (the Q, K and V projections are counted as the EinsumDense layers they are)."""
    query, value = getattr(layer, "_query_dense", None), getattr(layer, "_value_dense", None)
    if query is None or value is None:
        return None
    q_in, v_in = _built_input_shape(query), _built_input_shape(value)
    if q_in is None or v_in is None or len(q_in) != 3 or len(v_in) != 3 or None in (q_in[1], v_in[1]):
        return None  # only sequences (batch, time, features) are counted
    _, heads, d_k = (int(d) for d in query.kernel.shape)
    d_v = int(value.kernel.shape[-1])
    t_q, t_k = int(q_in[1]), int(v_in[1])
    d_out = int(layer._output_dense.kernel.shape[-1])
    return 2.0 * t_q * t_k * heads * (d_k + d_v) + 2.0 * t_q * heads * d_v * d_out
