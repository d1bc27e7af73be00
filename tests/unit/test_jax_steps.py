"""The jax step compiles once: the first step compiles it, no later step compiles anything."""

import pytest

from tests.conftest import fixture_json

pytest.importorskip("jax")
pytest.importorskip("keras")


def test_the_single_device_step_compiles_once():
    """Keras' variables are uncommitted arrays and the step's outputs committed ones: unless the
    state is committed before the first step, the second step compiles the whole step again."""
    per_step = fixture_json("compiles_once.py", "mlp", env={"JAX_PLATFORMS": "cpu"})["compiles_per_step"]
    assert per_step[0] >= 1 and per_step[1:] == [0, 0, 0], per_step
