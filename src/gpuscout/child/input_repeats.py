"""Do a script's batches repeat? Seen where fit reads them (watch_fit.TimedIterator, in the
script's own thread), after whatever made them: a PyDataset's worker threads or processes, or a
generator.

- A PyDataset of N batches gives the same batch for an index every time when, however many
  batches fit reads, no more than N of them are distinct. The check is by count, not by epoch
  or index, because neither can be trusted from outside: Keras 3 (3.15 measured) with more than
  one worker hands batches across epoch boundaries (its enqueuer, stopped after N batches, keeps
  the ones already made for the next epoch and starts a new shuffled order: an epoch then holds
  some batches twice and misses others, tests/fixtures/watch/keras_epochs.py), and worker
  processes make their batches where gpuscout's `__getitem__` wrapper never saw them. (The check
  used to run in `__getitem__`: under worker threads `same += digest == kept` read `same` before
  hashing released the GIL and wrote it back after, losing other threads' counts, so a
  deterministic dataset read as "1 of 60 differed".)
- A generator: one stream; its first batch seen again at position P makes P the candidate
  period, and every later batch must equal the one P before it (a stream that only reorders
  its batches does not repeat: replaying it would change the order the model sees).

Digests are of the batch's arrays, whole up to FULL_DIGEST_BYTES each, else SAMPLED_BLOCKS
blocks spread evenly over it, so the cost per batch is bounded (about a millisecond); checking
stops once MAX_CHECKED batches were compared. Only the standard library and numpy are used.
"""

from __future__ import annotations

import hashlib
import time

FULL_DIGEST_BYTES = 4 << 20
BLOCK_BYTES = 4096
SAMPLED_BLOCKS = 256  # 1 MiB of an array larger than FULL_DIGEST_BYTES
MAX_CHECKED = 256
# Digests kept of the first epoch or period at most: a longer one is not checked (its batches
# would not fit in host memory either, at any useful batch size)
MAX_KEPT = 100_000


class InputRepeats:
    """`batches_per_epoch`: a PyDataset's N (by count); None: a stream (a generator, an endless
    PyDataset)."""

    def __init__(self, batches_per_epoch: int | None) -> None:
        self.per_epoch = batches_per_epoch
        self.distinct: dict[str, int] = {}  # digest -> bytes (PyDataset)
        self.stream: list[str] = []  # the first period's digests in order (generator)
        self.bytes = 0  # host bytes of the first epoch's or period's batches
        self.seen = 0  # batches read
        self.period: int | None = None
        self.checked = self.same = 0
        self.seconds = 0.0
        self.stopped: str | None = None  # why checking stopped early

    def note(self, batch) -> None:
        if self.stopped or self.checked >= MAX_CHECKED:
            return
        start = time.monotonic()
        try:
            digest, size = batch_digest(batch)
        except Unhashable as exc:
            self.stopped = str(exc)
            return
        finally:
            self.seconds += time.monotonic() - start
        self.seen += 1
        if self.per_epoch is None:
            self._in_stream(digest, size)
        elif len(self.distinct) >= MAX_KEPT:
            self.stopped = f"more than {MAX_KEPT} batches in an epoch"
        else:
            if digest not in self.distinct:
                self.distinct[digest] = size
                self.bytes += size
            # beyond the first N batches read, each is one made again: it repeats while the
            # distinct batches are no more than N
            self.checked = max(0, self.seen - self.per_epoch)
            self.same = self.checked - max(0, len(self.distinct) - self.per_epoch)

    def _in_stream(self, digest: str, size: int) -> None:
        if self.period is None and self.stream and digest == self.stream[0]:
            self.period = len(self.stream)
        if self.period is None:
            if len(self.stream) >= MAX_KEPT:
                self.stopped = f"more than {MAX_KEPT} batches before any repeat"
                return
            self.stream.append(digest)
            self.bytes += size
            return
        # past the first period nothing is kept: each batch is compared with its place in it
        self.checked += 1
        self.same += digest == self.stream[(self.checked - 1) % self.period]  # position P + k: the k-th

    def counts(self) -> dict:
        out = {
            "checked": self.checked,
            "same": self.same,
            "bytes": self.bytes,
            "hash_s": round(self.seconds, 6),
            "order": "stream" if self.per_epoch is None else "epoch",
        }
        if self.per_epoch is None:
            out["period"] = self.period
        else:
            out["batches"] = len(self.distinct)
        if self.stopped:
            out["stopped"] = self.stopped
        return out


class Unhashable(Exception):
    """A batch whose arrays cannot be read on the host without a copy from a device."""


def batch_digest(batch) -> tuple[str, int]:
    """A digest of a batch's arrays (their bytes, shapes and dtypes) and their size in bytes."""
    import numpy as np

    digest = hashlib.blake2b(digest_size=12)
    size = 0
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            stack = [item[k] for k in sorted(item, key=str)] + stack
        elif isinstance(item, (list, tuple)):
            stack = list(item) + stack
        elif item is None:
            digest.update(b"\0none")
        elif isinstance(item, (int, float, str, bytes, bool)):
            digest.update(repr(item).encode())
        else:
            if not isinstance(item, np.ndarray):
                kind = type(item)
                if not kind.__module__.startswith("numpy"):
                    # a framework's tensor (on a device, or a copy away from one): not the host
                    # batches a cache would keep
                    raise Unhashable(f"the batches are {kind.__module__.split('.')[0]} tensors, not host arrays")
            array = np.asarray(item)
            size += array.nbytes
            digest.update(f"{array.dtype}{array.shape}".encode())
            if array.dtype.hasobject:  # strings as objects: their values, not their pointers
                digest.update(repr(array.ravel().tolist()[:4096]).encode())
                continue
            data = memoryview(np.ascontiguousarray(array)).cast("B")
            if len(data) <= FULL_DIGEST_BYTES:
                digest.update(data)
                continue
            last = len(data) - BLOCK_BYTES
            for block in range(SAMPLED_BLOCKS):
                offset = block * last // (SAMPLED_BLOCKS - 1)
                digest.update(data[offset : offset + BLOCK_BYTES])
    return digest.hexdigest(), size


def observe(x, repeats: InputRepeats):
    """Where the host batches of `x` pass in this process, before Keras hands them to a device
    (its JAX loop copies each to the GPU a batch ahead; TensorFlow's wraps them in tensors): a
    PyDataset's at Keras' PyDatasetAdapter._standardize_batch (every path of it calls it, after the
    workers, threads or processes, made the batch), a generator by a generator around it. Returns
    the input fit is then given and an undo for the end of fit."""
    if hasattr(x, "__next__") and not hasattr(x, "element_spec"):

        def noted(inner):
            for batch in inner:
                _note(repeats, batch)
                yield batch

        return noted(x), lambda: None
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    original = PyDatasetAdapter._standardize_batch

    def _standardize_batch(self, batch):
        if self.py_dataset is x:
            _note(repeats, batch)
        return original(self, batch)

    PyDatasetAdapter._standardize_batch = _standardize_batch

    def undo() -> None:
        PyDatasetAdapter._standardize_batch = original

    return x, undo


def _note(repeats: InputRepeats, batch) -> None:
    try:
        repeats.note(batch)
    except Exception:  # never the script's problem
        repeats.stopped = repeats.stopped or "a batch could not be read"
