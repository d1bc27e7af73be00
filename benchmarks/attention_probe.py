"""Why is ViT-B/16 slow under Keras/JAX? Checks whether Keras picks cuDNN flash attention for a
shape and times attention forward+backward with each JAX implementation.

    python benchmarks/attention_probe.py        (on the GPU machine; prints one table)
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from keras.src.backend.jax import nn as keras_jax_nn  # noqa: E402


def timed(fn, *args, reps=20):
    out = fn(*args)
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(reps):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / reps


for batch, seq, causal in ((256, 197, False), (256, 208, False)):
    key = jax.random.PRNGKey(0)
    q, k, v = (jax.random.normal(jax.random.fold_in(key, i), (batch, seq, 12, 64), jnp.bfloat16) for i in range(3))
    try:
        keras_jax_nn._can_use_flash_attention(q, k, v, None, raise_error=True)
        keras_says = "flash"
    except Exception as exc:  # the reason Keras falls back
        keras_says = f"no flash: {type(exc).__name__}: {str(exc)[:120]}"
    row = [f"B{batch} T{seq} causal={causal}", keras_says]
    pad = (-seq) % 16
    for impl in ("cudnn", "xla", "cudnn+pad") if pad else ("cudnn", "xla"):

        def loss(q, k, v, impl=impl, pad=pad, seq=seq, causal=causal):
            if impl == "cudnn+pad":  # what gpuscout's SelfAttention does for such lengths
                q, k, v = (jnp.pad(t, ((0, 0), (0, pad), (0, 0), (0, 0))) for t in (q, k, v))
                mask = jnp.broadcast_to(
                    (jnp.arange(seq + pad) < seq).reshape(1, 1, 1, -1), (1, 1, seq + pad, seq + pad)
                )
                out = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal, implementation="cudnn")
                return out[:, :seq].astype(jnp.float32).sum()
            return (
                jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl).astype(jnp.float32).sum()
            )

        try:
            step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
            row.append(f"{impl} fwd+bwd {timed(step, q, k, v) * 1e3:.2f} ms")
        except Exception as exc:
            row.append(f"{impl} failed: {type(exc).__name__}: {str(exc)[:120]}")
    print(" | ".join(row), flush=True)
