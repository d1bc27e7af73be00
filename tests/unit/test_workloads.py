import os
import subprocess
import sys

import pytest

from gpuscout import workloads
from gpuscout.core.errors import UsageError
from gpuscout.workloads.base import Workload


def test_unknown_workload_suggests_close_names():
    with pytest.raises(UsageError, match="did you mean resnet50"):
        workloads.get("resnet5")
    with pytest.raises(
        UsageError, match="known workloads: bert_base, gpt2_small, mlp, resnet18_cifar, resnet50, vit_b16"
    ):
        workloads.get("zzz")


def test_registry_refuses_duplicates():
    with pytest.raises(ValueError, match="registered twice"):
        workloads.register(workloads.get("mlp"))


def test_training_flops_are_three_forwards():
    w = workloads.get("mlp")
    assert isinstance(w, Workload)
    assert w.training_flops_per_sample() == 3 * 2 * (784 * 512 + 512 * 512 + 512 * 10)


def test_transformer_flops_follow_6n_plus_12lhqt_per_token():
    from gpuscout.workloads import gpt2_small

    w = workloads.get("gpt2_small")
    n, layers, heads, head_dim, t = gpt2_small.MATMUL_PARAMS, 12, 12, 64, 1024
    assert w.training_flops_per_sample(t) / t == 6 * n + 12 * layers * heads * head_dim * t
    assert n == 123_568_128  # 124M GPT-2 with an untied head over 50,304 tokens, less embeddings
    assert w.units_per_sample(t) == t and workloads.get("vit_b16").units_per_sample(None) == 1


@pytest.mark.slow
def test_declared_flops_match_the_models():
    """Each workload's analytic FLOPs equal what the counter finds in the built Keras model."""
    script = (
        "import keras\n"
        "from gpuscout.workloads import get, names\n"
        "from gpuscout.child.flops import forward_flops_per_sample\n"
        "for n in names():\n"
        "    w = get(n)\n"
        "    seq = 64 if w.is_sequence else None  # any length: the formula must follow it\n"
        "    print(n, forward_flops_per_sample(w.build_model(keras, seq)), int(w.forward_flops(seq)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    rows = [line.split() for line in out.stdout.splitlines()]
    assert {r[0] for r in rows} == set(workloads.names())
    for name, counted, declared in rows:
        assert int(counted) == int(declared), name


def test_labels_follow_every_built_in_keras_loss():
    import keras

    from gpuscout.child.user_model import label_kind

    expected = {
        None: "sparse",
        "sparse_categorical_crossentropy": "sparse",
        keras.losses.SparseCategoricalCrossentropy(): "sparse",
        "categorical_crossentropy": "onehot",
        keras.losses.CategoricalFocalCrossentropy(): "onehot",
        keras.losses.CategoricalHinge(): "onehot",
        "binary_crossentropy": "binary",
        keras.losses.binary_crossentropy: "binary",
        keras.losses.BinaryFocalCrossentropy(): "binary",
        "hinge": "binary",
        keras.losses.SquaredHinge(): "binary",
        "kl_divergence": "distribution",
        keras.losses.KLDivergence(): "distribution",
        "poisson": "positive",
        keras.losses.MeanSquaredLogarithmicError(): "positive",
        "mape": "positive",
        "mse": "dense",
        keras.losses.MeanSquaredError(): "dense",
        keras.losses.Huber(): "dense",
        keras.losses.CosineSimilarity(): "dense",
        "log_cosh": "dense",
    }
    assert {str(k): label_kind(k) for k in expected} == {str(k): v for k, v in expected.items()}


def test_flop_coverage_is_a_share_of_flops_not_of_weights():
    import keras

    from gpuscout.child.flops import count_with_coverage

    class Opaque(keras.layers.Layer):  # a layer the counter does not know: 100 weights
        def build(self, shape):
            self.w = self.add_weight(shape=(10, 10))

        def call(self, x):
            return x @ self.w

    inputs = keras.Input((10,))
    outputs = keras.layers.Dense(10)(Opaque()(inputs))  # counted: 2 x 10 x 10 = 200 FLOPs
    model = keras.Model(inputs, outputs)
    flops, coverage = count_with_coverage(model)
    assert flops == 200 and coverage == 200 / (200 + 2 * 100)  # the opaque layer adds >= 2 FLOPs per weight
