"""`mlp`: a tiny multilayer perceptron for smoke tests (784 -> 512 -> 512 -> 10, MNIST-sized).

Runs in a second on a laptop CPU; its numbers say nothing about a GPU.
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, fixed_flops, memory_models

_LAYERS = (784, 512, 512, 10)


def _build_model(keras, seq_len=None):
    inputs = keras.Input(shape=(_LAYERS[0],), name="features")
    x = inputs
    for width in _LAYERS[1:-1]:
        x = keras.layers.Dense(width, activation="relu")(x)
    logits = keras.layers.Dense(_LAYERS[-1], name="logits")(x)
    return keras.Model(inputs, logits, name="mlp")


def _build_optimizer(keras):
    return keras.optimizers.Adam(learning_rate=1e-3)


WORKLOAD = register(
    Workload(
        name="mlp",
        description="tiny MLP 784-512-512-10 (smoke tests)",
        fixed_input_shape=(_LAYERS[0],),
        num_classes=_LAYERS[-1],
        input_kind="vector",
        # 2 * sum(in * out) over the three dense layers = 2 * (784*512 + 512*512 + 512*10)
        forward_flops=fixed_flops(2 * sum(a * b for a, b in zip(_LAYERS, _LAYERS[1:]))),
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H200: docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(0.14, 0.006)),
        default_batch_size=256,
        reference_dataset_size=60_000,
        reference_dataset="MNIST train (60,000)",
        unit="samples",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
    )
)
