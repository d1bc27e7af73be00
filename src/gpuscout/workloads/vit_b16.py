"""`vit_b16`: ViT-B/16, 224x224x3, 1000 classes (Dosovitskiy et al., 2021; timm's vit_base_patch16_224).

16x16 patches by a strided convolution (196 tokens) plus a class token, learned positions,
12 pre-norm blocks (width 768, 12 heads, MLP 3072, exact GELU), final layer norm, linear head on
the class token; no dropout. AdamW (lr 1e-3, weight decay 0.05) as in DeiT/timm recipes.
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, block_matmul_params, fixed_flops, memory_models

WIDTH, LAYERS, HEADS, PATCH, IMAGE, CLASSES = 768, 12, 12, 16, 224, 1000
TOKENS = (IMAGE // PATCH) ** 2 + 1
_BLOCK_PARAMS = block_matmul_params(WIDTH, 4 * WIDTH)
# Patch embedding (196 patches x 768 x 768 multiply-adds), blocks over 197 tokens, attention,
# head on the class token; 2 FLOPs per multiply-add.
FORWARD_FLOPS = (
    2 * ((TOKENS - 1) * PATCH * PATCH * 3 * WIDTH + LAYERS * TOKENS * _BLOCK_PARAMS + WIDTH * CLASSES)
    + 4 * LAYERS * TOKENS * TOKENS * WIDTH
)


def _build_model(keras, seq_len=None):
    from gpuscout.workloads.transformer_layers import ClassToken, LayerNorm, LearnedPositions, block

    layers = keras.layers
    images = keras.Input(shape=(IMAGE, IMAGE, 3))
    x = layers.Conv2D(WIDTH, PATCH, strides=PATCH, name="patch_embed")(images)
    x = layers.Reshape(((IMAGE // PATCH) ** 2, WIDTH))(x)
    x = LearnedPositions()(ClassToken()(x))
    for _ in range(LAYERS):
        x = block(
            x,
            dim=WIDTH,
            heads=HEADS,
            mlp_dim=4 * WIDTH,
            causal=False,
            pre_norm=True,
            epsilon=1e-6,
            gelu_approximate=False,
        )
    x = LayerNorm(epsilon=1e-6)(x)
    logits = layers.Dense(CLASSES, name="head")(x[:, 0])
    return keras.Model(images, logits, name="vit_b16")


def _build_optimizer(keras):
    return keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=0.05)


WORKLOAD = register(
    Workload(
        name="vit_b16",
        description="ViT-B/16, 224x224x3, 1000 classes",
        input_kind="image",
        num_classes=CLASSES,
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H100 (2026-11-25): docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(1.15, 63.9), fp32=(0.87, 164.4)),
        default_batch_size=256,
        reference_dataset_size=1_281_167,
        reference_dataset="ImageNet-1k train (1,281,167)",
        unit="images",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
        forward_flops=fixed_flops(FORWARD_FLOPS),
        fixed_input_shape=(IMAGE, IMAGE, 3),
    )
)
