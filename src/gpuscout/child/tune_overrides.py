"""Inside a script run by `gpuscout tune -- COMMAND`: one change applied to the unchanged script.

gpuscout passes the change in GPUSCOUT_TUNE (JSON) beside watch's own settings; the watch hook
(child/watch_hook.py) calls these functions where Keras gives them a place, before the first
layer is built (the precision policy), at `Model.compile` (XLA, steps_per_execution) and at
`Model.fit` (the input, the batch). Nothing in a file changes. What was applied goes to the
parent as a `watch_applied` event, so the record says what really ran; a change that finds
nothing to apply to (no PyDataset for workers) says so instead.

Only the standard library, Keras and the frameworks are imported here, and those lazily.
"""

from __future__ import annotations

import json
import os
import queue
import threading

from gpuscout.child.watch_state import HASH_BATCHES, emit, is_pydataset

CHANGES = json.loads(os.environ.get("GPUSCOUT_TUNE", "{}") or "{}")
_said: set[str] = set()


def applied(name: str, detail: str) -> None:
    """Tell the parent once per change what was applied, where."""
    if name not in _said:
        _said.add(name)
        emit("watch_applied", change=name, detail=detail)


def on_keras(keras_module_loaded) -> None:
    """Keras' model module has just been executed: no layer exists yet."""
    policy = CHANGES.get("mixed_precision")
    if policy:
        # keras' top-level package is still being imported here: its own module, not keras.mixed_precision
        from keras.src.dtype_policies.dtype_policy import set_dtype_policy

        set_dtype_policy(policy)
        applied("mixed_precision", f"keras.mixed_precision.set_global_policy({policy!r}) before the first layer")


def compile_kwargs(kwargs: dict) -> dict:
    if CHANGES.get("jit_compile"):
        kwargs["jit_compile"] = True
        applied("jit_compile", "model.compile(..., jit_compile=True)")
    spe = CHANGES.get("steps_per_execution")
    if spe:
        kwargs["steps_per_execution"] = int(spe)
        applied("steps_per_execution", f"model.compile(..., steps_per_execution={int(spe)})")
    return kwargs


def fit_input(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The input fit reads, changed as asked: a PyDataset's workers, a tf.data dataset's prefetch,
    a generator drained by a prefetching thread, the batch size of in-memory arrays."""
    x = args[0] if args else kwargs.get("x")
    kind = type(x)
    changed = x
    workers = CHANGES.get("workers")
    if workers and is_pydataset(x):
        processes = bool(CHANGES.get("processes"))
        x._workers, x._use_multiprocessing = int(workers), processes  # PyDataset reads these at fit
        x._max_queue_size = max(getattr(x, "_max_queue_size", 10) or 10, 2 * int(workers))
        applied("workers", f"PyDataset(workers={int(workers)}, use_multiprocessing={processes})")
    if CHANGES.get("cache") and is_pydataset(x):
        kept: dict = {}

        def cached(original):
            def __getitem__(self, index):
                if index not in kept:  # worker threads share it; worker processes keep their own
                    kept[index] = original(self, index)
                return kept[index]
            return __getitem__

        with_getitem(x, cached)
        applied("cache", "each batch kept after it is first made (the same batches every epoch)")
    if CHANGES.get("prefetch") and kind.__module__.startswith("tensorflow") and hasattr(x, "prefetch"):
        import tensorflow as tf

        # what the tf.data performance guide asks for, from outside the pipeline: autotuning, maps
        # run in parallel where they are stateless (map_parallelization), order not enforced, and a
        # prefetch at the end (TensorFlow injects one by default; an explicit one costs nothing)
        options = tf.data.Options()
        options.autotune.enabled = True
        options.experimental_optimization.map_parallelization = True
        options.deterministic = False
        changed = x.with_options(options).prefetch(tf.data.AUTOTUNE)
        applied("prefetch", "tf.data: map(..., num_parallel_calls=tf.data.AUTOTUNE, deterministic=False) and "
                            "dataset.prefetch(tf.data.AUTOTUNE)")
    if CHANGES.get("prefetch") and (hasattr(x, "__next__") and not hasattr(x, "element_spec")):
        changed = prefetched(x, int(CHANGES.get("prefetch_depth", 8)))
        applied("prefetch", "the generator drained by a background thread, 8 batches ahead")
    if CHANGES.get("device_batches"):
        args, kwargs = device_batches(args, kwargs)
    batch = CHANGES.get("batch_size")
    if batch:
        kwargs["batch_size"] = int(batch)
        applied("batch_size", f"model.fit(..., batch_size={int(batch)})")
    if changed is not x:
        if args:
            args = (changed, *args[1:])
        else:
            kwargs["x"] = changed
    return args, kwargs


def device_batches(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """In-memory arrays given to fit on jax, moved to the device once and handed to fit in device
    slices: Keras otherwise gathers each batch on one host thread and copies it to the device
    every step (keras' array_slicing; on an H100 a ResNet-50 fed that way ran 1.62x slower,
    docs/benchmarks.md). Batches come in order: the arrays are not reshuffled each epoch."""
    import keras

    x = args[0] if args else kwargs.get("x")
    y = args[1] if len(args) > 1 else kwargs.get("y")
    if keras.backend.backend() != "jax" or y is None or len(args) > 2 or kwargs.get("validation_split") \
            or not hasattr(x, "shape") or not hasattr(y, "shape"):
        return args, kwargs
    import jax

    batch = int(kwargs.get("batch_size") or 32)
    xs, ys = jax.device_put(x), jax.device_put(y)
    steps = len(xs) // batch

    def batches():
        while True:
            for i in range(steps):
                yield xs[i * batch:(i + 1) * batch], ys[i * batch:(i + 1) * batch]

    kwargs = {k: v for k, v in kwargs.items() if k not in ("x", "y", "batch_size", "shuffle")}
    kwargs.setdefault("steps_per_epoch", steps)
    applied("device_batches", "x, y = jax.device_put(x), jax.device_put(y) once, and fit fed device slices")
    return (batches(),), kwargs


def with_getitem(x, wrap) -> None:
    """Give the PyDataset `x` a `__getitem__` wrapped by `wrap(original)`: `x[i]` looks the
    method up on the class, so the instance's class is swapped for a subclass of it."""
    kind = type(x)
    x.__class__ = type(kind.__name__, (kind,), {"__getitem__": wrap(kind.__getitem__), "__module__": kind.__module__})


class InputRepeats:
    """Tune's baseline: whether a PyDataset makes the same batch for an index every epoch. The
    first HASH_BATCHES indices asked for are kept as digests and compared whenever they are made
    again (in any order: fit shuffles a PyDataset's indices each epoch)."""

    def __init__(self) -> None:
        self.digests: dict = {}
        self.checked = self.same = 0

    @classmethod
    def watch(cls, x) -> "InputRepeats":
        repeats = cls()

        def noted(original):
            def __getitem__(self, index):
                batch = original(self, index)
                try:
                    repeats.note(index, batch)
                except Exception:  # never the script's problem
                    pass
                return batch
            return __getitem__

        with_getitem(x, noted)
        return repeats

    def note(self, index, batch) -> None:
        if index in self.digests:
            self.checked += 1
            self.same += batch_digest(batch) == self.digests[index]
        elif len(self.digests) < HASH_BATCHES:
            self.digests[index] = batch_digest(batch)

    def counts(self) -> dict[str, int]:
        return {"checked": self.checked, "same": self.same}


def batch_digest(batch) -> str:
    """A digest of a batch's arrays (their numbers, shapes and dtypes): equal for the same batch."""
    import hashlib

    import numpy as np

    digest = hashlib.blake2b(digest_size=12)
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            stack = [item[k] for k in sorted(item)] + stack
        elif isinstance(item, (list, tuple)):
            stack = list(item) + stack
        elif item is not None:
            array = np.ascontiguousarray(np.asarray(item))
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def prefetched(inner, depth: int):
    """A Python generator read ahead by one background thread: the next batches are made while
    the device computes (what a keras PyDataset with one worker does, for a plain generator).
    Returned as a generator, since that is what fit recognises (types.GeneratorType)."""
    ahead: queue.Queue = queue.Queue(maxsize=depth)
    end = object()

    def fill() -> None:
        try:
            for item in inner:
                ahead.put(item)
        except BaseException as exc:  # the generator's own error reaches fit, as it would have
            ahead.put(exc)
            return
        ahead.put(end)

    threading.Thread(target=fill, daemon=True, name="gpuscout-prefetch").start()

    def read():
        while (item := ahead.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item

    return read()
