"""The jax step compiles once: the first step compiles it, no later step compiles anything."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("keras")

SCRIPT = Path(__file__).parents[1] / "fixtures" / "compiles_once.py"


def test_the_single_device_step_compiles_once():
    """Keras' variables are uncommitted arrays and the step's outputs committed ones: unless the
    state is committed before the first step, the second step compiles the whole step again."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    done = subprocess.run([sys.executable, str(SCRIPT), "mlp"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    per_step = json.loads(done.stdout.strip().splitlines()[-1])["compiles_per_step"]
    assert per_step[0] >= 1 and per_step[1:] == [0, 0, 0], per_step
