"""`resnet50`: ResNet-50 (v1: stride 2 in the first 1x1 convolution) from keras.applications,
224x224x3, 1000 classes, no weights.

keras.applications defines the model exactly, so we use it (weights=None: nothing downloaded).
Optimizer: SGD with momentum 0.9, as in the reference ImageNet recipe (Goyal et al., 2017).
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, fixed_flops, memory_models


def _build_model(keras, seq_len=None):
    return keras.applications.ResNet50(
        weights=None, input_shape=(224, 224, 3), classes=1000, classifier_activation=None
    )


def _build_optimizer(keras):
    return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)


WORKLOAD = register(
    Workload(
        name="resnet50",
        description="ResNet-50 (keras.applications), 224x224x3, 1000 classes",
        fixed_input_shape=(224, 224, 3),
        num_classes=1000,
        input_kind="image",
        # Counted from the keras.applications model by gpuscout.child.flops (conv + dense,
        # 2 FLOPs per multiply-add): 3.86 GMACs. He et al. (2016) Table 1 quotes 3.8e9 for v1;
        # the often-quoted 4.1 GMACs is v1.5 (stride in the 3x3 convolution), which is not this.
        forward_flops=fixed_flops(7_715_946_496),
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H200: docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(0.37, 39.3), fp32=(0.59, 76.2)),
        default_batch_size=256,
        reference_dataset_size=1_281_167,
        reference_dataset="ImageNet-1k train (1,281,167)",
        unit="images",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
        # Gradient bucket of the two-GPU step (2026-11-26, docs/benchmarks.md): 8 MiB: 98.7% on two H200s
        # against 97.7% at 12 MiB, 97.2% at 16 and 96.0% without buckets
        gradient_bucket_mib=8,
    )
)
