"""`gpt2_small`: GPT-2 124M, causal language modelling, context 1024 (option --seq-len).

As nanoGPT's GPT-2 (Radford et al., 2019; github.com/karpathy/nanoGPT model.py): 12 pre-norm
blocks, width 768, 12 heads, MLP 3072, GELU (tanh), learned positions, vocabulary 50,257 padded
to 50,304 (a multiple of 64, as nanoGPT does for speed), untied output head, no dropout. AdamW
(lr 6e-4, betas 0.9/0.95, weight decay 0.1) as in nanoGPT's GPT-2 config.
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, block_matmul_params, memory_models, transformer_flops

VOCAB, WIDTH, LAYERS, HEADS = 50_304, 768, 12, 12
# Parameters in matrix products (N of 6N + 12LHQT): per block QKV, output, two MLP matrices,
# then the untied head: 12 x 7,077,888 + 768 x 50,304 = 123.6M (biases and norms excluded).
MATMUL_PARAMS = LAYERS * block_matmul_params(WIDTH, 4 * WIDTH) + WIDTH * VOCAB


def _build_model(keras, seq_len):
    from gpuscout.workloads.transformer_layers import LayerNorm, LearnedPositions, block

    layers = keras.layers
    tokens = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, WIDTH, embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02))(tokens)
    x = LearnedPositions()(x)
    for _ in range(LAYERS):
        x = block(
            x,
            dim=WIDTH,
            heads=HEADS,
            mlp_dim=4 * WIDTH,
            causal=True,
            pre_norm=True,
            epsilon=1e-5,
            gelu_approximate=True,
        )
    x = LayerNorm(epsilon=1e-5)(x)
    logits = layers.Dense(VOCAB, use_bias=False, name="lm_head")(x)
    return keras.Model(tokens, logits, name="gpt2_small")


def _build_optimizer(keras):
    return keras.optimizers.AdamW(learning_rate=6e-4, beta_1=0.9, beta_2=0.95, weight_decay=0.1)


WORKLOAD = register(
    Workload(
        name="gpt2_small",
        description="GPT-2 124M causal LM (nanoGPT layout), context 1024",
        input_kind="tokens",
        num_classes=VOCAB,
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H100 (2026-11-25): docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(2.33, 482.4), fp32=(2.15, 2127.9)),
        default_batch_size=16,
        reference_dataset_size=9_035_582_198,
        reference_dataset="OpenWebText train, GPT-2 tokens (9.0B, nanoGPT's prepare.py)",
        unit="tokens",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
        # Gradient bucket of the two-GPU step (2026-11-26, docs/benchmarks.md): 64 MiB: 92.6% on two H200s, as
        # 128; 25 MiB 91.3%, 256 MiB 91.9%, without buckets 90.7%
        gradient_bucket_mib=64,
        forward_flops=transformer_flops(MATMUL_PARAMS, LAYERS, WIDTH),
        default_seq_len=1024,
        max_seq_len=1024,
    )
)
