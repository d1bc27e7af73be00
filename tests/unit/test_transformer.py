"""The transformer blocks (run on the CPU with the JAX backend, in a child interpreter)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from gpuscout.child import data
from gpuscout.workloads import get

pytestmark = pytest.mark.slow

PADDING_SCRIPT = r"""
import jax, numpy as np, keras
from gpuscout.workloads import transformer_layers as transformer
layer = transformer.SelfAttention(24, 3, causal=CAUSAL)
x = np.random.default_rng(0).standard_normal((2, 13, 24)).astype("float32")
plain = np.asarray(layer(x))
transformer._padding_for_cudnn = lambda seq_len: 3      # as on a GPU for a length cuDNN refuses
padded_layer = transformer.SelfAttention(24, 3, causal=CAUSAL)
padded_layer.build(x.shape)
assert padded_layer.padding == 0  # float32: cuDNN's fused attention has no kernel, Keras' own runs
half = transformer.SelfAttention(24, 3, causal=CAUSAL, dtype="mixed_bfloat16")
half.build(x.shape)
assert half.padding == 3
padded_layer.padding = 3  # the padded path itself, compared in float32
padded_layer.set_weights(layer.get_weights())

def grads(the_layer):  # of a loss through the layer, for its input and its weights
    def loss(inputs, weights):
        out, _ = the_layer.stateless_call(weights, [], inputs)
        return (out * out).sum()
    return jax.grad(loss, argnums=(0, 1))(x, [w.value for w in the_layer.trainable_weights])

(gx, gw), (px, pw) = grads(layer), grads(padded_layer)
differences = [np.abs(np.asarray(padded_layer(x)) - plain).max(), np.abs(px - gx).max(),
               *(np.abs(a - b).max() for a, b in zip(pw, gw))]
print(float(max(differences)))
"""


@pytest.mark.parametrize("causal", [False, True])
def test_padding_for_cudnn_changes_nothing_forward_or_backward(causal):
    out = subprocess.run(
        [sys.executable, "-c", PADDING_SCRIPT.replace("CAUSAL", str(causal))],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) < 1e-5


def test_masked_lm_labels_mark_fifteen_percent():
    x, y = data.synthetic_batches(get("bert_base"), 64, seed=0, seq_len=128)[0]
    assert x.shape == y.shape == (64, 128) and x.dtype == np.int32
    labelled = (y != -100).mean()
    assert 0.13 < labelled < 0.17
    assert y[y != -100].max() < 30_522 and x.max() < 30_522


def test_causal_lm_labels_are_all_tokens():
    x, y = data.synthetic_batches(get("gpt2_small"), 2, seed=0, seq_len=32)[0]
    assert x.shape == y.shape == (2, 32) and (y >= 0).all() and y.max() < 50_304


GELU_SCRIPT = r"""
import contextlib, io, math, jax, numpy as np, keras
from jax.ad_checkpoint import print_saved_residuals
from gpuscout.workloads.transformer_layers import Gelu
x = 3 * np.random.default_rng(0).standard_normal((4, 8, 32)).astype("float32")
# the exact form by hand, in float64: x * (1 + erf(x / sqrt 2)) / 2
by_hand = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x.astype("float64"))
exact, exact_bf16 = np.asarray(Gelu(False)(x)), np.asarray(Gelu(False, dtype="bfloat16")(x))
print("exact", float(np.abs(exact - by_hand).max()), exact_bf16.dtype,
      float(np.abs(exact_bf16.astype("float64") - by_hand).max() / np.abs(by_hand).max()))
for approximate in (False, True):
    layer = Gelu(approximate)
    plain = lambda t: keras.activations.gelu(t, approximate=approximate)
    ours = lambda t: layer(t)
    forward = np.abs(np.asarray(ours(x)) - np.asarray(plain(x))).max()
    by_jax = jax.grad(lambda t: (plain(t) ** 2).sum())(x)
    backward = np.abs(jax.grad(lambda t: (ours(t) ** 2).sum())(x) - by_jax).max() / np.abs(by_jax).max()
    kept = []  # what each keeps for the backward pass, counted in tensors of x's shape
    for f in (ours, plain):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            print_saved_residuals(lambda t: (f(t) ** 2).sum(), x)
        kept.append(sum(line.startswith("f32[4,8,32]") for line in printed.getvalue().splitlines()))
    print(approximate, float(forward), float(backward), kept[0], kept[1])
"""


def test_gelu_recomputed_in_the_backward_pass_keeps_less_and_changes_nothing():
    out = subprocess.run(
        [sys.executable, "-c", GELU_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")[-4:-1]
    assert len(lines) == 3 and lines[0].startswith("exact "), out.stdout
    _, float32_error, bf16_dtype, bf16_error = lines[0].split()
    # the exact forward pass (PyTorch's formula, not jax.nn.gelu's erfc) against float64 by hand:
    # float32 to rounding; bfloat16 in, bfloat16 out, within bfloat16's precision (2^-8 relative)
    assert float(float32_error) < 1e-5 and bf16_dtype == "bfloat16" and float(bf16_error) < 2**-8, lines[0]
    for line in lines[1:]:
        _, forward, backward, ours, plain = line.split()
        # the derivative by hand against JAX's own of the same expression (float32, relative to the largest);
        # the forward passes agree to float32 rounding (the tanh form is jax.nn.gelu's own)
        assert float(forward) < 1e-5 and float(backward) < 1e-6
        # ours keeps x and the squared loss's input (its output); the plain GELU keeps more of x's size
        assert int(ours) <= 2 < int(plain), line


LAYER_NORM_SCRIPT = r"""
import jax, numpy as np, keras
from gpuscout.workloads.transformer_layers import LayerNorm
rng = np.random.default_rng(0)
# tokens whose features are off centre (mean 4, spread 1 to 3), as a residual stream's can be
x = (4 + rng.uniform(1, 3, (2, 5, 1)) * rng.standard_normal((2, 5, 48))).astype("float32")
for dtype in ("float32", "bfloat16"):
    ours, keras_own = LayerNorm(epsilon=1e-6, dtype=dtype), keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours.build(x.shape)
    keras_own.build(x.shape)
    weights = [rng.standard_normal(48).astype("float32"), rng.standard_normal(48).astype("float32")]
    ours.set_weights(weights)
    keras_own.set_weights(weights)
    f = lambda layer: lambda t, g, b: layer.stateless_call([g, b], [], t)[0]
    out_dtype = str(f(ours)(x, *weights).dtype)
    a, b = (np.asarray(f(layer)(x, *weights), dtype="float32") for layer in (ours, keras_own))
    loss = lambda layer: lambda t, g, b: (f(layer)(t, g, b).astype("float32") * np.arange(48)).sum()
    grads = [jax.grad(loss(layer), argnums=(0, 1, 2))(x, *weights) for layer in (ours, keras_own)]
    worst = max(float(np.abs(np.asarray(p) - np.asarray(q)).max() / np.abs(np.asarray(q)).max())
                for p, q in zip(*grads))
    print(dtype, out_dtype, float(np.abs(a - b).max() / np.abs(b).max()), worst)
"""


def test_layer_norm_in_one_pass_matches_keras_forward_and_backward():
    out = subprocess.run(
        [sys.executable, "-c", LAYER_NORM_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")[-3:-1]
    assert [line.split()[0] for line in lines] == ["float32", "bfloat16"], out.stdout
    for line, tolerance in zip(lines, (1e-5, 2**-7)):
        dtype, out_dtype, forward, backward = line.split()
        # relative to the largest value: float32 to rounding; bfloat16 to a rounding of its output
        assert out_dtype == dtype and float(forward) < tolerance and float(backward) < tolerance, line
