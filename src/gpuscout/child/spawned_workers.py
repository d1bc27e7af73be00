"""A PyDataset's batches made in worker processes that are new interpreters: the definition
`tune --patch` copies into the user's file (tune/changes/process_workers.py) and the one
`tune -- COMMAND` applies inside the script (child/applies/process_workers.py), as child/fixes.py's
are: standing alone, with nothing but `keras`, cloudpickle and the standard library."""

import keras


# Keras' own worker processes (use_multiprocessing=True) are forked from the training process, and
# a process forked once JAX (or TensorFlow) has started its threads hangs or aborts: keras#18431,
# keras#20619, both open; an H200 host ran 8 forked workers at 0.08x of one thread (issue 77). These
# workers are new interpreters instead, that never import the script: multiprocessing's "spawn"
# runs the script's module again in each (its training too, where the script has no __main__ guard).
class SpawnedWorkers(keras.utils.PyDataset):
    """A PyDataset whose batches are made in `workers` worker processes, each a new Python
    interpreter (never forked from this one), for a dataset whose Python work holds the GIL.
    Keras asks for the batches as it would of `dataset` (its order, its shuffle), from `workers`
    threads that each wait on a process; a batch's arrays come back through memory shared with
    that process, and its other values pickled. The dataset is sent to the processes by value
    (cloudpickle: a class of the script's own with it), and again after on_epoch_begin and
    on_epoch_end where they changed it, so its state is the one this process keeps. Random draws
    inside __getitem__ come from each process's own generator, as in Keras' worker processes.
    Linux and macOS."""

    SERVE = r"""
import mmap, os, pickle, sys, traceback
from multiprocessing.connection import Connection
try:  # gone with the training process, even where that one is killed (Linux)
    import ctypes, signal
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
except Exception:
    pass
conn, memory = Connection(int(sys.argv[1])), int(sys.argv[2])
sys.path[:0] = pickle.loads(conn.recv_bytes())
import numpy as np
dataset, size, view, broken = None, 0, None, None

def flat(value, leaves):
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [flat(v, leaves) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, flat(v, leaves)) for k, v in value.items()])
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        leaves.append(np.ascontiguousarray(value))
        return ("array", len(leaves) - 1)
    return ("value", value)

while True:
    try:
        kind, payload = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        break
    try:
        if kind == "state":
            made, changed, gone = payload
            if made is not None:
                made = pickle.loads(made)
                dataset = made.__new__(made)
            for name in gone:
                dataset.__dict__.pop(name, None)
            dataset.__dict__.update({name: pickle.loads(b) for name, b in changed.items()})
            continue
        if broken is not None:
            raise broken
        leaves = []
        tree = flat(dataset[payload], leaves)
        places, end = [], 0
        for a in leaves:
            places.append((end, a.shape, a.dtype))
            end += -(-a.nbytes // 64) * 64
        if end > size:
            size = max(end, 2 * size)
            os.ftruncate(memory, size)
            view = mmap.mmap(memory, size)
        for (at, _, _), a in zip(places, leaves):
            if a.nbytes:
                np.frombuffer(view, np.uint8, a.nbytes, at)[:] = a.reshape(-1).view(np.uint8)
        conn.send_bytes(pickle.dumps(("batch", (tree, places, size))))
    except BaseException as exc:
        if kind == "state":
            broken = exc
            continue
        try:
            sent = pickle.dumps(("error", (exc, traceback.format_exc())))
        except Exception:
            sent = pickle.dumps(("error", (None, traceback.format_exc())))
        conn.send_bytes(sent)
"""

    def __init__(self, dataset, workers):
        import os
        import pickle
        import queue
        import socket
        import subprocess
        import sys
        import tempfile
        import weakref
        from multiprocessing.connection import Connection

        super().__init__(workers=workers, use_multiprocessing=False, max_queue_size=2 * workers)
        self.inner = dataset
        made = self._pickled(type(dataset), "class")
        state = self._state()
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}  # a dataset needs no GPU
        self._conns, self._memory, self._views, self._idle = [], [], [], queue.Queue()
        procs = []
        for n in range(workers):
            ours, theirs = socket.socketpair()
            memory = tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-c", self.SERVE, str(theirs.fileno()), str(memory.fileno())],
                    pass_fds=(theirs.fileno(), memory.fileno()),
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
            )
            theirs.close()
            conn = Connection(ours.detach())
            conn.send_bytes(pickle.dumps(list(sys.path)))
            conn.send_bytes(pickle.dumps(("state", (made, state, ()))))
            self._conns.append(conn)
            self._memory.append(memory)
            self._views.append((0, None))
            self._idle.put(n)
        self._sent = state  # what each process holds
        self._procs = procs
        weakref.finalize(self, SpawnedWorkers._close, self._conns, procs)

    @staticmethod
    def _close(conns, procs):
        for conn in conns:
            conn.close()  # each process ends at the end of its connection
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except Exception:
                proc.kill()

    def _pickled(self, value, name):
        import cloudpickle

        try:
            return cloudpickle.dumps(value)
        except Exception as exc:
            raise TypeError(f"SpawnedWorkers: the dataset's {name} cannot be sent to a process: {exc}") from exc

    def _state(self):
        return {name: self._pickled(value, name) for name, value in vars(self.inner).items()}

    def _sync(self):
        """The dataset's attributes that changed since they were sent, sent to every process."""
        import pickle

        state = self._state()
        changed = {k: b for k, b in state.items() if self._sent.get(k) != b}
        gone = [k for k in self._sent if k not in state]
        if not changed and not gone:
            return
        held = [self._idle.get() for _ in self._conns]  # each process between two batches
        try:
            for n in held:
                self._conns[n].send_bytes(pickle.dumps(("state", (None, changed, gone))))
        finally:
            for n in held:
                self._idle.put(n)
        self._sent = state

    def __len__(self):
        return len(self.inner)

    @property
    def num_batches(self):
        return self.inner.num_batches

    def __getitem__(self, index):
        import math
        import mmap
        import pickle

        import numpy as np

        n = self._idle.get()
        try:
            conn = self._conns[n]
            conn.send_bytes(pickle.dumps(("item", index)))
            try:
                kind, payload = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                raise RuntimeError(f"SpawnedWorkers: worker process {n} ended while making batch {index}") from None
            if kind == "error":
                exc, text = payload
                if exc is not None:
                    raise exc
                raise RuntimeError(f"SpawnedWorkers: batch {index} failed in worker process {n}:\n{text}")
            tree, places, size = payload
            mapped, view = self._views[n]
            if size != mapped:
                view = mmap.mmap(self._memory[n].fileno(), size)
                self._views[n] = (size, view)
            arrays = [
                np.frombuffer(view, dtype, math.prod(shape), at).reshape(shape).copy()
                if math.prod(shape) * dtype.itemsize
                else np.empty(shape, dtype)
                for at, shape, dtype in places
            ]
            return self._built(tree, arrays)
        finally:
            self._idle.put(n)

    def _built(self, tree, arrays):
        kind, value = tree
        if kind == "array":
            return arrays[value]
        if kind == "dict":
            return {k: self._built(v, arrays) for k, v in value}
        if kind in ("tuple", "list"):
            items = [self._built(v, arrays) for v in value]
            return tuple(items) if kind == "tuple" else items
        return value

    def on_epoch_begin(self):
        self.inner.on_epoch_begin()
        self._sync()

    def on_epoch_end(self):
        self.inner.on_epoch_end()
        self._sync()
