"""The jax input-copy candidates of served requests (measure/host_to_device.py), on the CPU device:
every candidate must deliver the same batch, and `choose` must keep the fastest it measured."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from gpuscout.child import host_to_device  # noqa: E402
from gpuscout.child.host_to_device import JaxStager  # noqa: E402


@pytest.fixture
def stager():
    return JaxStager(jax, jax.local_devices()[0])


def test_every_candidate_delivers_the_same_batch(stager):
    x = np.arange(10 * 3 * 2, dtype=np.float32).reshape(10, 3, 2)
    assert stager.candidates(10) == ["direct", "pinned", "split4"]  # the CPU client has pinned host memory too
    assert stager.candidates(3) == ["direct", "pinned"]  # fewer rows than slices: nothing to split
    for method in stager.candidates(10):
        parts = stager.put(x, method)
        assert len(parts) == (4 if method == "split4" else 1)
        np.testing.assert_array_equal(np.concatenate([np.asarray(p) for p in parts]), x)
        assert all(p.sharding.memory_kind == "device" for p in parts)  # pinned ends on the device, not the host


def test_split_falls_back_to_one_put_when_the_batch_is_smaller_than_the_splits(stager):
    assert len(stager.put(np.ones((2, 3), np.float32), "split4")) == 1


def test_choose_keeps_the_fastest_and_applies_it_to_that_shape_only(stager, monkeypatch):
    cost_s = {"direct": 0.004, "pinned": 0.001, "split4": 0.002}
    clock = [0.0]
    real_put = JaxStager.put

    def put(self, x, method=None):
        clock[0] += cost_s[method or self._chosen.get((x.shape, x.dtype.str), "direct")]
        return real_put(self, x, method)

    monkeypatch.setattr(JaxStager, "put", put)
    monkeypatch.setattr(host_to_device.time, "monotonic", lambda: clock[0])
    x = np.ones((8, 4), np.float32)
    chosen = stager.choose(x)
    assert chosen["method"] == "pinned"
    assert chosen["copy_ms"] == pytest.approx({"direct": 4.0, "pinned": 1.0, "split4": 2.0})
    before = clock[0]
    stager.put(x)
    assert clock[0] - before == pytest.approx(0.001)  # the chosen path serves this shape
    before = clock[0]
    stager.put(np.ones((16, 4), np.float32))
    assert clock[0] - before == pytest.approx(0.004)  # an unmeasured shape keeps the plain copy


def test_the_served_forward_pass_gives_the_same_outputs_on_every_input_path():
    """The split copy reaches the model through a concatenation inside the compiled forward pass."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import numpy as np, keras\n"
        "from gpuscout.child import host_to_device\n"
        "from gpuscout.child.formats import keras_server\n"
        "from gpuscout.core.spec import RunSpec\n"
        "made = []\n"
        "class Recorded(host_to_device.JaxStager):\n"
        "    def __init__(self, *a):\n"
        "        super().__init__(*a); made.append(self)\n"
        "host_to_device.JaxStager = Recorded\n"
        "model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation='relu'), "
        "keras.layers.Dense(3)])\n"
        "server = keras_server(RunSpec(workload='mlp', backend='jax', batch_size=12), model, keras)\n"
        "stager, = made\n"
        "x = np.random.default_rng(0).standard_normal((12, 6)).astype(np.float32)\n"
        "want = np.asarray(model(x))\n"
        "for method in stager.candidates(len(x)):\n"
        "    stager._chosen[(x.shape, x.dtype.str)] = method\n"
        "    np.testing.assert_allclose(server.predict(x, fetch=True), want, rtol=1e-5, atol=1e-6)\n"
        "print('ok', server.device, server.choose_input_path)\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=src),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok cpu None"  # on the CPU the copy is not chosen by timing
