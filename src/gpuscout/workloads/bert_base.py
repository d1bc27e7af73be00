"""`bert_base`: BERT-base masked-LM pretraining step, sequence length 128 (option --seq-len, up to 512).

As Devlin et al. (2019) / Hugging Face's BertForMaskedLM: 12 post-norm blocks, width 768,
12 heads, FFN 3072, exact GELU, vocabulary 30,522, learned positions, the MLM head (dense +
GELU + layer norm + decoder to the vocabulary, logits at every position as BertForMaskedLM
computes them), 15% of positions masked (the others carry the ignored label -100). Differences
that do not change the matrix work: no token-type embedding (a single segment), no dropout
(the PyTorch peer in benchmarks/ is configured the same), an untied decoder. AdamW (lr 1e-4,
weight decay 0.01) as in the paper's pretraining.
"""

from gpuscout.workloads import register
from gpuscout.workloads.base import Workload, block_matmul_params, memory_models, transformer_flops

VOCAB, WIDTH, LAYERS, HEADS = 30_522, 768, 12, 12
MATMUL_PARAMS = LAYERS * block_matmul_params(WIDTH, 4 * WIDTH) + WIDTH * WIDTH + WIDTH * VOCAB  # + MLM head


def _build_model(keras, seq_len):
    from gpuscout.workloads.transformer_layers import Gelu, LayerNorm, LearnedPositions, block

    layers = keras.layers
    tokens = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, WIDTH, embeddings_initializer=keras.initializers.TruncatedNormal(stddev=0.02))(tokens)
    x = LayerNorm(epsilon=1e-12)(LearnedPositions()(x))
    for _ in range(LAYERS):
        x = block(
            x,
            dim=WIDTH,
            heads=HEADS,
            mlp_dim=4 * WIDTH,
            causal=False,
            pre_norm=False,
            epsilon=1e-12,
            gelu_approximate=False,
        )
    x = Gelu(approximate=False)(layers.Dense(WIDTH)(x))
    x = LayerNorm(epsilon=1e-12)(x)
    logits = layers.Dense(VOCAB, name="mlm_decoder")(x)
    return keras.Model(tokens, logits, name="bert_base")


def _build_optimizer(keras):
    return keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01)


WORKLOAD = register(
    Workload(
        name="bert_base",
        description="BERT-base masked-LM pretraining step, sequence length 128",
        input_kind="tokens",
        num_classes=VOCAB,
        # Peak device memory (fixed GiB, MiB per sample), JAX on an H100 (2026-11-25): docs/benchmarks.md.
        memory=memory_models(mixed_bfloat16=(1.66, 42.2), fp32=(1.55, 112.0)),
        default_batch_size=256,
        reference_dataset_size=3_300_000_000,
        reference_dataset="BooksCorpus + English Wikipedia (3.3B words, Devlin et al.)",
        unit="tokens",
        build_model=_build_model,
        build_optimizer=_build_optimizer,
        # Gradient bucket of the two-GPU step (2026-11-26, docs/benchmarks.md): 64 MiB: 99.4% on two H200s
        # against 97.8% at 8 MiB and 94.5% without buckets
        gradient_bucket_mib=64,
        forward_flops=transformer_flops(MATMUL_PARAMS, LAYERS, WIDTH),
        default_seq_len=128,
        max_seq_len=512,
        ignore_label=-100,
        masked_fraction=0.15,
    )
)
