"""Host-side (numpy) data for the two data modes; the backends move it to the device.

Synthetic batches are random, never zeros: zeros can run faster than real data (a bf16 matrix
product ran 13% faster on zeros on an H200: shared/device METHOD.md).
"""

from __future__ import annotations

import numpy as np

from gpuscout.workloads.base import Workload

# Device-resident synthetic batches are rotated so that no step reuses the previous one's
# input; bounded so the rotation never costs more than this much device memory.
SYNTHETIC_BATCHES_MAX = 4
SYNTHETIC_BYTES_MAX = 1 << 30
# The host dataset of `pipeline` mode: enough distinct batches that the CPU caches do not hold it.
PIPELINE_HOST_BATCHES = 16


def synthetic_batches(workload: Workload, batch_size: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    batch_bytes = 4 * batch_size * int(np.prod(workload.input_shape))
    count = int(max(2, min(SYNTHETIC_BATCHES_MAX, SYNTHETIC_BYTES_MAX // max(batch_bytes, 1))))
    batches = []
    for _ in range(count):
        x = rng.standard_normal((batch_size, *workload.input_shape), dtype=np.float32)
        y = rng.integers(0, workload.num_classes, size=(batch_size,), dtype=np.int32)
        batches.append((x, y))
    return batches


def host_dataset(workload: Workload, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Host-resident samples as a real loader would hold them: uint8 images or float32 vectors."""
    rng = np.random.default_rng(seed)
    n = batch_size * PIPELINE_HOST_BATCHES
    if workload.input_kind == "image":
        x = rng.integers(0, 256, size=(n, *workload.input_shape), dtype=np.uint8)
    else:
        x = rng.standard_normal((n, *workload.input_shape), dtype=np.float32)
    y = rng.integers(0, workload.num_classes, size=(n,), dtype=np.int32)
    return x, y


def augment_numpy(x: np.ndarray, rng: np.random.Generator, cost: int, image: bool) -> np.ndarray:
    """The numpy twin of tensorflow_steps' tf.data map: decode to float, normalise, flip, jitter."""
    out = x.astype(np.float32) * (1.0 / 255.0 if image else 1.0)
    for _ in range(cost):
        if image:
            flip = rng.random(out.shape[0]) < 0.5
            out[flip] = out[flip, :, ::-1, :]
        out = out * np.float32(1.0 + 0.1 * (rng.random() - 0.5))
        out = (out - out.mean(axis=tuple(range(1, out.ndim)), keepdims=True)).astype(np.float32)
    return out
