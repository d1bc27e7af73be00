"""What a Keras `fit` was given, read by watch's instrumentation (child/watch_fit.py): the input's
kind, its batch size, a PyDataset's workers and batches per epoch, and where the input is written
(for `tune --patch`). Only the standard library and, lazily, the frameworks are imported here.
"""

from __future__ import annotations

from gpuscout.child import tf_data
from gpuscout.child.watch_state import is_pydataset


def _parts(batch):
    """The batch's leaves in order, through dicts, lists and tuples; a tf.distribute PerReplica (one
    part per device) is one leaf, its parts in its `values`."""
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            stack = list(item.values()) + stack
        elif isinstance(item, (list, tuple)):
            stack = list(item) + stack
        else:
            yield item


def _per_replica(item) -> bool:
    return type(item).__name__ == "PerReplica" and hasattr(item, "values")


def leading_samples(batch) -> int | None:
    """The batch's size: the leading dimension of its first array (under a tf.distribute strategy,
    of its replicas' parts together: the global batch)."""
    for item in _parts(batch):
        if _per_replica(item):
            parts = [leading_samples(part) for part in item.values]
            return sum(parts) if parts and None not in parts else None
        if getattr(item, "shape", None) is not None and len(item.shape):
            try:
                return int(item.shape[0])
            except (TypeError, ValueError):
                return None
    return None


def batch_bytes(batch) -> int | None:
    """The bytes of a batch's arrays together (None where one has no size in bytes)."""
    total = 0
    for item in _parts(batch):
        if item is None:
            continue
        size = batch_bytes(list(item.values)) if _per_replica(item) else getattr(item, "nbytes", None)
        if size is None and hasattr(item, "dtype") and hasattr(item, "shape"):  # a tf.Tensor
            try:
                size = int(item.shape.num_elements()) * item.dtype.size
            except (AttributeError, TypeError):
                return None
        if size is None:
            return None
        total += int(size)
    return total


def input_site(x) -> dict | None:
    """Where the input is written: a PyDataset's `__init__` (its workers), a generator's function."""
    code = getattr(x, "gi_code", None) or getattr(getattr(type(x), "__init__", None), "__code__", None)
    return {"file": code.co_filename, "line": code.co_firstlineno, "name": code.co_name} if code else None


def batches_per_epoch(x) -> int | None:
    """A PyDataset's number of batches (None for an endless one, or another input)."""
    try:
        return int(x.num_batches) if is_pydataset(x) and x.num_batches is not None else None
    except Exception:
        return None


def input_workers(x) -> dict:
    """A PyDataset's workers and whether they are processes (None for other inputs)."""
    if not is_pydataset(x):
        return {}
    try:
        return {"input_workers": int(x.workers), "input_multiprocessing": bool(x.use_multiprocessing)}
    except Exception:
        return {}


def static_batch_size(dataset) -> int | None:
    """A tf.data dataset's batch size when its element spec fixes it (drop_remainder=True)."""
    try:
        import tensorflow as tf

        first = tf.nest.flatten(dataset.element_spec)[0]
        return int(first.shape[0]) if first.shape.rank and first.shape[0] is not None else None
    except Exception:
        return None


def input_type(x) -> str:
    if x is None:  # gpuscout.callback(): a callback is never shown fit's input
        return "not seen"
    kind = type(x)
    module, name = kind.__module__, kind.__name__
    if name == "ndarray":
        return "numpy"
    if module.startswith("tensorflow") and hasattr(x, "element_spec"):
        return "tf.data"
    if module.startswith(("jax", "jaxlib")):
        return "jax array"
    if is_pydataset(x):
        return "PyDataset"
    if hasattr(x, "__next__") or name == "generator":
        return "generator"
    if "DataLoader" in name:
        return "torch DataLoader"
    if isinstance(x, (dict, list, tuple)):
        return "numpy"
    return name


def _first(data):
    """validation_data's inputs: the first of an (x, y) tuple, or the data itself."""
    return data[0] if isinstance(data, tuple) and data else data


def training_arguments(fit, model, args: tuple, kwargs: dict) -> dict:
    """What fit was told that decides the training a tune change must keep (tune/same_training.py):
    its shuffle as given (None: not given), whether it validates, its validation_steps, and whether
    samples are weighted; read through fit's own signature, so a positional argument counts too."""
    import inspect

    try:
        given = inspect.signature(fit).bind_partial(model, *args, **kwargs).arguments
    except (TypeError, ValueError):
        given = kwargs
    shuffle = given.get("shuffle")
    return {
        "shuffle": shuffle if shuffle is None or isinstance(shuffle, bool) or shuffle == "batch" else bool(shuffle),
        "validation": given.get("validation_data") is not None or bool(given.get("validation_split")),
        "validation_steps": int(given["validation_steps"]) if given.get("validation_steps") else None,
        "weighted": given.get("sample_weight") is not None or given.get("class_weight") is not None,
        # what validates: arrays (validation_split's too) are batched by fit at validation_batch_size,
        # a dataset, generator or PyDataset by itself (tune's validation_batch)
        "validation_input": (
            input_type(_first(given["validation_data"]))
            if given.get("validation_data") is not None
            else "numpy"
            if given.get("validation_split")
            else None
        ),
        "validation_batch_size": int(given["validation_batch_size"]) if given.get("validation_batch_size") else None,
        # a tf.data validation set's maps: whether a map moved into the model shapes it too
        "validation_maps": tf_data.map_sites(given["validation_data"])
        if given.get("validation_data") is not None
        else [],
    }


# The bytes of a sample a batch's mark reads from each array: a row of an image batch is 150 KiB
# at 224x224x3 in uint8; more says nothing more about which sample it is.
MARK_BYTES = 1 << 16


def mark_parts(batch) -> list | None:
    """What batch_mark digests, taken from the batch without waiting for the device: each array's
    shape and dtype, and its first and last sample (a device array's sliced there, their copy to
    the host started). Read when a fit's epoch begins; digested at its end, when Keras has waited
    for the epoch anyway: reading a device array here would wait for every step before it, and
    a fit of few calls an epoch lost 10% of its pace to that wait (an H200, 2026-12-02)."""
    parts: list = []
    try:
        for item in _parts(batch):
            if item is None or _per_replica(item):
                parts.append(("none", ()))
                continue
            shape = tuple(getattr(item, "shape", ()))
            label = f"{getattr(item, 'dtype', type(item).__name__)}{shape}"
            rows = [item] if not shape else [item[:1], item[-1:]]
            for row in rows:
                started = getattr(row, "copy_to_host_async", None)
                if started is not None:
                    started()
            parts.append((label, rows))
    except Exception:
        return None
    return parts


def batch_mark(parts: list | None) -> str | None:
    """A digest of a batch's arrays' shapes and dtypes and of their first and last samples
    (mark_parts): which samples the batch holds (a reshuffle puts others first). None where an
    array could not be read."""
    import hashlib

    import numpy as np

    if parts is None:
        return None
    digest = hashlib.blake2b(digest_size=8)
    try:
        for label, rows in parts:
            digest.update(label.encode())
            for row in rows:
                data = np.asarray(row)
                if data.dtype.hasobject or not data.shape:
                    digest.update(repr(data.tolist()).encode())
                    continue
                data = np.ascontiguousarray(data)
                digest.update(memoryview(data).cast("B")[:MARK_BYTES])
    except Exception:
        return None
    return digest.hexdigest()
