"""Transformer building blocks for the sequence and vision workloads (GPT-2, BERT, ViT).

Imported only inside the child, from a workload's build function: it imports Keras. Attention
goes through ``keras.ops.dot_product_attention``, which picks the backend's fused kernel
(cuDNN flash attention under JAX on a GPU, for bf16/fp16 inputs) when it can.
"""

from __future__ import annotations

import keras
from keras import layers, ops

# cuDNN's fused attention trains only on sequence lengths it supports (an H200 with jax 0.11:
# 197, ViT-B/16's length, is refused and Keras falls back to XLA's unfused attention, 2.29 ms
# against 0.98 ms per layer at length 208; docs/benchmarks.md). Under JAX on a GPU, such
# sequences are padded to a multiple of this and the padding is left out through the sequence
# lengths cuDNN takes (`jax.nn.dot_product_attention`'s query/key_value_seq_lengths), not a
# dense mask, which cost 0.47 ms a layer more (1.45 against 0.98 ms): the same result.
CUDNN_SEQ_MULTIPLE = 16


def _padding_for_cudnn(seq_len: int) -> int:
    if keras.backend.backend() != "jax" or seq_len % CUDNN_SEQ_MULTIPLE == 0:
        return 0
    import jax

    return (-seq_len) % CUDNN_SEQ_MULTIPLE if jax.default_backend() == "gpu" else 0


class SelfAttention(layers.Layer):
    """Multi-head self-attention: one fused QKV projection, fused attention, output projection."""

    def __init__(self, dim: int, heads: int, causal: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dim, self.heads, self.causal = dim, heads, causal
        self.qkv = layers.Dense(3 * dim, name="qkv")
        self.out = layers.Dense(dim, name="out")
        self.seq_len = None
        self.padding = 0

    def build(self, input_shape) -> None:
        self.seq_len = int(input_shape[1])
        # cuDNN's fused attention takes bf16/fp16 only: in float32 the padded path would have no
        # kernel (NotImplementedError on an H100), so float32 keeps Keras' own attention (XLA).
        self.padding = _padding_for_cudnn(self.seq_len) if self.compute_dtype in ("bfloat16", "float16") else 0
        self.qkv.build(input_shape)
        self.out.build(input_shape)

    def call(self, x):
        head_dim = self.dim // self.heads
        qkv = ops.reshape(self.qkv(x), (-1, self.seq_len, 3, self.heads, head_dim))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (batch, seq, heads, head_dim)
        if self.padding:  # JAX only (_padding_for_cudnn)
            import jax
            import jax.numpy as jnp

            q, k, v = (jnp.pad(t, [[0, 0], [0, self.padding], [0, 0], [0, 0]]) for t in (q, k, v))
            lengths = jnp.full((q.shape[0],), self.seq_len, jnp.int32)
            # implementation=None would be XLA's unfused attention, not "the best available" (jax
            # 0.11 measured on an H200: 2,533 against 3,252 img/s, 32 against 24 GiB)
            attended = jax.nn.dot_product_attention(
                q,
                k,
                v,
                is_causal=self.causal,
                query_seq_lengths=lengths,
                key_value_seq_lengths=lengths,
                implementation="cudnn" if jax.default_backend() == "gpu" else None,
            )[:, : self.seq_len]
        else:
            attended = ops.dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(ops.reshape(attended, (-1, self.seq_len, self.dim)))

    def forward_flops_per_sample(self) -> int:
        """Projections (QKV and output: 4 x seq x dim^2 multiply-adds) and Q.K^T and A.V
        (2 x seq^2 x dim multiply-adds), at 2 FLOPs per multiply-add."""
        return 2 * (4 * self.seq_len * self.dim * self.dim) + 4 * self.seq_len * self.seq_len * self.dim


class Gelu(layers.Layer):
    """GELU (exact, or the tanh approximation) that keeps only its input for the backward pass.

    Differentiated by JAX, `x * (1 + erf(x / sqrt 2)) / 2` keeps two more tensors of the MLP's
    width per block besides the activation itself: ViT-B/16 at batch 256 in bf16 held 3 x 0.29
    GiB per block, 10.4 of its step's 23.5 GiB at the peak (XLA's live-range dump of the compiled
    step, benchmarks/step_memory.py; docs/benchmarks.md). Here the backward pass computes the
    derivative from the kept input, in float32, as PyTorch's own GELU does (its gelu_backward takes
    the input alone), and the exact forward pass is PyTorch's formula in float32 (_jax_gelu says
    why). `jax.checkpoint` around the activation kept as little but cost ViT 2.3% of its speed on
    an H100 (its recomputation is fenced off from XLA's fusion by an optimization barrier). Other
    backends: the plain activation."""

    def __init__(self, approximate: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.approximate = approximate

    def call(self, x):
        if keras.backend.backend() == "jax":
            return _jax_gelu(self.approximate)(x)
        return keras.activations.gelu(x, approximate=self.approximate)

    def get_config(self) -> dict:
        return {**super().get_config(), "approximate": self.approximate}


def _jax_gelu(approximate: bool):
    """jax.nn.gelu with a hand-written derivative that needs only the input:
    exact: d/dx x·Φ(x) = Φ(x) + x·φ(x); tanh form (Hendrycks & Gimpel 2016): with
    u = c·(x + 0.044715·x³), c = sqrt(2/π): 0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·c·(1 + 3·0.044715·x²)."""
    import math

    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def gelu(x):
        if approximate:
            return jax.nn.gelu(x, approximate=True)
        # PyTorch's formula, x·(1 + erf(x/√2))/2 in float32, not jax.nn.gelu's x·erfc(-x/√2)/2: XLA
        # expands erfc into two polynomials and an exponential, and wrote -x/√2 out to memory first;
        # ViT-B/16's forward GELU took 0.71 ms a block against timm's 0.24, now 0.26 (H100, bf16,
        # batch 256, benchmarks/step_kernels.py; docs/benchmarks.md). What erfc buys is relative
        # accuracy in the negative tail, where GELU is near 0 and this form is off by at most the
        # float32 rounding of 1 + erf (6e-8) times |x|/2.
        t = x.astype(jnp.float32)
        return (0.5 * t * (1 + jax.lax.erf(t * (1 / math.sqrt(2))))).astype(x.dtype)

    def forward(x):
        return gelu(x), x

    def backward(x, grad):
        t = x.astype(jnp.float32)
        if approximate:
            c = math.sqrt(2 / math.pi)
            tanh = jnp.tanh(c * (t + 0.044715 * t * t * t))
            slope = 0.5 * (1 + tanh) + 0.5 * t * (1 - tanh * tanh) * c * (1 + 3 * 0.044715 * t * t)
        else:
            slope = 0.5 * (1 + jax.lax.erf(t / math.sqrt(2))) + t * jnp.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
        return ((grad.astype(jnp.float32) * slope).astype(grad.dtype),)

    gelu.defvjp(forward, backward)
    return gelu


class LayerNorm(layers.LayerNormalization):
    """Keras' layer normalisation (same weights and options) that, under JAX, takes the variance
    as E[x²] − E[x]², both means from one pass over x, as flax's LayerNorm does by default
    (`use_fast_variance`); Keras' own takes the mean, then the variance of x − mean, a reduction
    that waits for the first. Measured on ViT-B/16 (H100, bf16, batch 256): 1.4% a step, found in
    the backward pass (its layer-norm kernels 5.24 -> 4.56 ms a step; the forward pass's stayed
    at 3.9 ms), BERT and GPT-2 gained too (benchmarks/step_kernels.py, before_after.py;
    docs/benchmarks.md). In float32, with the variance clamped at zero: the same result to
    float32 rounding where the features' mean is not many times their spread (a residual
    stream's tokens; tested against Keras' own). Other backends, other axes and RMS scaling:
    Keras' own."""

    def call(self, inputs):
        if keras.backend.backend() != "jax" or self.rms_scaling or self.axis not in (-1, [-1], len(inputs.shape) - 1):
            return super().call(inputs)
        x = ops.cast(inputs, "float32")
        mean = ops.mean(x, axis=-1, keepdims=True)
        variance = ops.maximum(ops.mean(ops.square(x), axis=-1, keepdims=True) - ops.square(mean), 0.0)
        outputs = (x - mean) * ops.rsqrt(variance + self.epsilon)
        if self.gamma is not None:
            outputs = outputs * ops.cast(self.gamma, "float32")
        if self.beta is not None:
            outputs = outputs + ops.cast(self.beta, "float32")
        return ops.cast(outputs, self.compute_dtype)


class LearnedPositions(layers.Layer):
    """Adds a learned embedding per position (GPT-2, BERT, ViT)."""

    def build(self, input_shape) -> None:
        self.table = self.add_weight(
            shape=tuple(int(d) for d in input_shape[1:]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="positions",
        )

    def call(self, x):
        return x + ops.cast(self.table, x.dtype)


class ClassToken(layers.Layer):
    """Prepends ViT's learned [class] token to the patch sequence."""

    def build(self, input_shape) -> None:
        self.token = self.add_weight(shape=(1, 1, int(input_shape[-1])), initializer="zeros", name="cls")

    def call(self, x):
        token = ops.broadcast_to(ops.cast(self.token, x.dtype), (ops.shape(x)[0], 1, ops.shape(x)[-1]))
        return ops.concatenate([token, x], axis=1)


def block(
    x, *, dim: int, heads: int, mlp_dim: int, causal: bool, pre_norm: bool, epsilon: float, gelu_approximate: bool
):
    """One encoder/decoder block; pre-norm (GPT-2, ViT) or post-norm (BERT)."""

    def mlp(h):
        h = layers.Dense(mlp_dim)(h)
        h = Gelu(gelu_approximate)(h)
        return layers.Dense(dim)(h)

    attention = SelfAttention(dim, heads, causal)
    if pre_norm:
        x = x + attention(LayerNorm(epsilon=epsilon)(x))
        return x + mlp(LayerNorm(epsilon=epsilon)(x))
    x = LayerNorm(epsilon=epsilon)(x + attention(x))
    return LayerNorm(epsilon=epsilon)(x + mlp(x))
