"""Host-side (numpy) data for the two data modes; the backends move it to the device.

Synthetic batches are random, never zeros: zeros can run faster than real data (a bf16 matrix
product ran 13% faster on zeros on an H200: shared/device METHOD.md).
"""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from gpuscout.core.spec import DataMode, RunSpec
from gpuscout.workloads.base import Workload

# Device-resident synthetic batches are rotated so that no step reuses the previous one's
# input; bounded so the rotation never costs more than this much device memory.
SYNTHETIC_BATCHES_MAX = 4
SYNTHETIC_BYTES_MAX = 1 << 30
# The host dataset of `pipeline` mode: enough distinct batches that the CPU caches do not hold it.
PIPELINE_HOST_BATCHES = 16


def sample_batch(
    workload: Workload, rng: np.random.Generator, n: int, seq_len: int | None, host_images: bool
) -> tuple[np.ndarray, np.ndarray]:
    """n samples of the workload's input and labels (random, never zeros)."""
    shape = (n, *workload.input_shape(seq_len))
    if workload.label_shape is not None:  # a user's model: inputs and labels of its own shapes
        if workload.input_kind == "ids":
            x = rng.integers(0, workload.vocab_size, size=shape, dtype=np.int32)
        else:
            x = rng.standard_normal(shape, dtype=np.float32)
        label_shape = (n, *workload.label_shape)
        if workload.label_kind == "dense":
            return x, rng.standard_normal(label_shape, dtype=np.float32)
        if workload.label_kind == "binary":
            return x, rng.integers(0, 2, size=label_shape).astype(np.float32)
        if workload.label_kind == "positive":
            return x, rng.uniform(0.5, 1.5, size=label_shape).astype(np.float32)
        if workload.label_kind == "distribution":
            logits = rng.standard_normal(label_shape)
            return x, (np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)).astype(np.float32)
        if workload.label_kind == "onehot":
            ids = rng.integers(0, workload.num_classes, size=label_shape[:-1])
            return x, np.eye(workload.num_classes, dtype=np.float32)[ids]
        return x, rng.integers(0, workload.num_classes, size=label_shape, dtype=np.int32)
    if workload.input_kind == "tokens":
        x = rng.integers(0, workload.num_classes, size=shape, dtype=np.int32)
        y = rng.integers(0, workload.num_classes, size=shape, dtype=np.int32)
        if workload.masked_fraction is not None:  # masked LM: only masked positions carry a label
            y = np.where(rng.random(shape) < workload.masked_fraction, y, workload.ignore_label).astype(np.int32)
        return x, y
    if workload.input_kind == "image" and host_images:
        x = rng.integers(0, 256, size=shape, dtype=np.uint8)  # as a decoder hands them over
    else:
        x = rng.standard_normal(shape, dtype=np.float32)
    return x, rng.integers(0, workload.num_classes, size=(n,), dtype=np.int32)


def synthetic_batches(
    workload: Workload, batch_size: int, seed: int, seq_len: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x_bytes = 4 * batch_size * int(np.prod(workload.input_shape(seq_len)))
    count = int(max(2, min(SYNTHETIC_BATCHES_MAX, SYNTHETIC_BYTES_MAX // max(x_bytes, 1))))
    return [sample_batch(workload, rng, batch_size, seq_len, host_images=False) for _ in range(count)]


def host_dataset(
    workload: Workload, batch_size: int, seed: int, seq_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Host-resident samples as a real loader would hold them: uint8 images, float32 vectors,
    int32 token ids."""
    rng = np.random.default_rng(seed)
    return sample_batch(workload, rng, batch_size * PIPELINE_HOST_BATCHES, seq_len, host_images=True)


def augment_numpy(x: np.ndarray, rng: np.random.Generator, cost: int, kind: str) -> np.ndarray:
    """The numpy twin of tensorflow_steps' tf.data map: decode to float, normalise, flip, jitter.
    Token ids pass through unchanged (tokenisation happens before a training pipeline)."""
    if kind in ("tokens", "ids"):
        return x
    image = kind == "image"
    out = x.astype(np.float32) * (1.0 / 255.0 if image else 1.0)
    for _ in range(cost):
        if image:
            flip = rng.random(out.shape[0]) < 0.5
            out[flip] = out[flip, :, ::-1, :]
        out = out * np.float32(1.0 + 0.1 * (rng.random() - 0.5))
        out = (out - out.mean(axis=tuple(range(1, out.ndim)), keepdims=True)).astype(np.float32)
    return out


def numpy_pipeline(x: np.ndarray, y: np.ndarray, spec: RunSpec, workload: Workload):
    """Producer threads that shuffle, augment and batch on the host, ahead of the training loop
    (naive mode: the same work in the training loop's own thread, nothing ahead)."""
    if spec.data is DataMode.naive:
        yield from numpy_batches(x, y, spec, workload, np.random.default_rng(spec.seed))
        return
    # Tuned: several producer threads (numpy releases the GIL in its array work), the numpy
    # counterpart of tf.data's parallel map; each keeps two batches ahead.
    threads = spec.pipeline_threads or os.cpu_count() or 1
    out: queue.Queue = queue.Queue(maxsize=2 * threads)

    def produce(seed: int) -> None:
        for batch in numpy_batches(x, y, spec, workload, np.random.default_rng(seed)):
            out.put(batch)

    for i in range(threads):
        threading.Thread(target=produce, args=(spec.seed + i,), daemon=True).start()
    while True:
        yield out.get()


def numpy_batches(x, y, spec: RunSpec, workload: Workload, rng):
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(x) - spec.batch_size + 1, spec.batch_size):
            idx = order[start : start + spec.batch_size]
            yield augment_numpy(x[idx], rng, spec.pipeline_cost, workload.input_kind), y[idx]
