"""The measuring child seeds as keras.utils.set_random_seed does, without importing TensorFlow into a
jax child (Keras seeds TensorFlow whenever it is installed: 2.3 s a process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import SRC

SEEDED = """
import json, sys
import numpy as np, keras
{seed}
first = np.random.rand()
layer = keras.layers.Dense(3)
layer.build((None, 2))
print(json.dumps({{"tensorflow": "tensorflow" in sys.modules, "numpy": first,
                  "kernel": np.asarray(layer.kernel).tolist()}}))
"""


def seeded(line: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SEEDED.format(seed=line)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_jax_child_is_seeded_as_keras_seeds_it_without_tensorflow():
    ours = seeded("from gpuscout.child.worker import set_seed; set_seed(keras, 7)")
    keras_own = seeded("keras.utils.set_random_seed(7)")
    assert ours["tensorflow"] is False and keras_own["tensorflow"] is True  # TensorFlow is installed here
    assert ours["numpy"] == keras_own["numpy"] and ours["kernel"] == keras_own["kernel"]


def test_keras_is_imported_without_the_packages_no_child_uses_and_they_import_after():
    """child/worker.import_keras hides matplotlib, pandas and scikit-learn from Keras' import (a
    second and a half of every measuring child where they are installed, as in this suite's
    environment), and from that import only: each is importable, and real, after it."""
    code = (
        "import json, sys\n"
        "from gpuscout.child.worker import HIDDEN_FROM_KERAS, import_keras\n"
        "keras = import_keras()\n"
        "loaded = [name for name in HIDDEN_FROM_KERAS if name in sys.modules]\n"
        "import pandas\n"
        "print(json.dumps({'loaded': loaded, 'keras': keras.__name__, 'frame': pandas.DataFrame({'a': [1]}).shape}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"loaded": [], "keras": "keras", "frame": [1, 1]}
