"""`resnet18_cifar`: the CIFAR variant of ResNet-18, 32x32x3, 10 classes.

As in He et al. (2016) section 4.2 and the widely used kuangliu/pytorch-cifar ResNet18: a 3x3
stem convolution with 64 filters and no max-pool, then four stages of two BasicBlocks
(64, 128, 256, 512 filters; stride 2 at the first block of stages 2-4, with a 1x1 projection
shortcut), global average pooling and a dense classifier. keras.applications has no ResNet-18,
so the model is defined here.
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, fixed_flops, memory_models

_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


def _norm(layers):
    # PyTorch's default running-statistics momentum (0.1, i.e. Keras' 0.9), as in the reference
    # model; Keras' default 0.99 leaves the statistics at their initial values for the first
    # few hundred steps, so short time-to-accuracy runs evaluated at chance (10%).
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)


def _basic_block(keras, x, filters, stride):
    layers = keras.layers
    shortcut = x
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
    y = _norm(layers)(y)
    y = layers.ReLU()(y)
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = _norm(layers)(y)
    if stride != 1 or x.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
        shortcut = _norm(layers)(shortcut)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def _build_model(keras, seq_len=None):
    layers = keras.layers
    inputs = keras.Input(shape=(32, 32, 3))
    x = layers.Conv2D(64, 3, padding="same", use_bias=False)(inputs)
    x = _norm(layers)(x)
    x = layers.ReLU()(x)
    for filters, stride in _STAGES:
        x = _basic_block(keras, x, filters, stride)
        x = _basic_block(keras, x, filters, 1)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(10, name="logits")(x)
    return keras.Model(inputs, logits, name="resnet18_cifar")


def _build_optimizer(keras):
    return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, nesterov=True)


WORKLOAD = register(
    Workload(
        name="resnet18_cifar",
        description="ResNet-18, CIFAR variant (3x3 stem, no max-pool), 32x32x3, 10 classes",
        fixed_input_shape=(32, 32, 3),
        num_classes=10,
        input_kind="image",
        # Counted from this model by gpuscout.child.flops (conv + dense): 0.555 GMACs, the
        # 0.56 G multiply-adds usually quoted for kuangliu/pytorch-cifar's ResNet18.
        forward_flops=fixed_flops(1_110_845_440),
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H200: docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(0.14, 2.5)),
        default_batch_size=512,
        reference_dataset_size=50_000,
        reference_dataset="CIFAR-10 train (50,000)",
        unit="images",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
    )
)
