"""Data files in the formats gpuscout reads, written for the tests."""

from __future__ import annotations

import pickle

import numpy as np


def write_cifar_dir(path, per_batch=20, seed=0):
    """A CIFAR-10 python-format directory (as Keras' cache holds it), with random images."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            b"labels": list(rng.integers(0, 10, size=per_batch)),
        }
        (path / name).write_bytes(pickle.dumps(batch))
    return path
