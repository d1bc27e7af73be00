"""Watching in the process that trains: a notebook's cell (`%%gpuscout watch`), any code under
`with gpuscout.watching():`, or one fit given `callbacks=[gpuscout.callback()]`.

The instrumentation is `watch -- COMMAND`'s own (child/watch_hook wraps Model.fit, child/watch_fit
times each step); only where its events go differs: to a list in this process instead of a pipe
to a parent. NVML samples the GPUs this process uses, and the record, its verdict and the store
are the same as for a script. Nothing stays patched afterwards: Model.fit and Model.compile are
Keras' own again, the user's callbacks untimed, and a later fit runs as if gpuscout were not here.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path

from gpuscout.analysis import watch as analysis
from gpuscout.child import watch_hook
from gpuscout.child.watch_state import STATE, emit
from gpuscout.core import events, watch_events
from gpuscout.core.errors import RunError, UsageError
from gpuscout.core.provenance import relevant_env
from gpuscout.core.text import storable
from gpuscout.measure import engine
from gpuscout.measure.gpus import GpuWatch, visible_gpus
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store, default_store_path
from gpuscout.store.rescue import Rescue
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import DEFAULT_INTERVAL_S

TAIL_CHARACTERS = 8000

_active: InProcess | None = None


def watched_by_a_parent() -> bool:
    """This process was started by `gpuscout watch`/`tune` (a notebook's kernel under `watch
    train.ipynb`): its fits are already watched, and the parent's record is the one kept."""
    return STATE.sink is None and bool(os.environ.get(events.EVENTS_FD_ENV))


class InProcess:
    """One in-process watch: its events, its GPUs' telemetry, then its record, stored."""

    def __init__(self, label: str, store: str | Path | None = None) -> None:
        self.label, self.store_path = label, store
        self.events: list[dict] = []
        self.record: WatchRecord | None = None
        self.nvml: Nvml | None = None
        self.gpus: GpuWatch | None = None

    def start(self) -> InProcess:
        global _active
        if _active is not None:  # a fit that raised before a callback's on_train_end: ended here
            _active.finish("failed", "ended unfinished when the next watch began")
        Store(self.store_path).close()  # a store that cannot be opened is bad input: said before the cell runs
        _active = self
        self.created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.nvml = Nvml()
        self.session = engine.Session(self.nvml)
        STATE.reset(sink=self.events.append)
        emit("watch_hooked", python=sys.version.split()[0], argv=[self.label])
        if self.nvml.available:
            self.gpus = GpuWatch(self.nvml, visible_gpus(self.nvml, dict(os.environ)), DEFAULT_INTERVAL_S)
            self.gpus.start(os.getpid())
        self.started = time.monotonic()
        return self

    def finish(self, status: str, error: str = "") -> WatchRecord:
        """Stop sampling, derive the record and store it (beside the store when it cannot take it)."""
        global _active
        _active = None if _active is self else _active
        ended = time.monotonic()
        STATE.reset()
        used, samples, attribution = self.gpus.stop() if self.gpus is not None else ([], [], None)
        self.nvml.close()
        notes = [attribution.note] if attribution and attribution.note else []
        observed = analysis.Observed(
            command=[self.label],
            workload=self.label,
            mode="in_process",
            status=status,
            exit_code=None if status != "failed" else 1,
            duration_s=ended - self.started,
            # as a child's channel would carry them (JSON), then decoded as the parent does
            events=[e for e in (watch_events.decode(json.dumps(storable(e), default=str)) for e in self.events) if e],
            environment=storable(self.session.host),
            child_env=storable(relevant_env(dict(os.environ))),
            group_id=self.session.group_id,
            record_id=uuid.uuid4().hex[:12],
            created_utc=self.created,
            cwd=storable(os.getcwd()),
            stderr_tail=error[-TAIL_CHARACTERS:],
            gpus=used,
            samples=samples,
            interval_s=DEFAULT_INTERVAL_S,
            other_pids=attribution.other_pids if attribution else [],
            notes=notes,
            ended_monotonic_s=ended,
        )
        self.record = analysis.derive(observed)
        try:
            with Store(self.store_path) as store:
                store.keep([self.record])  # saved beside the store when it cannot take it
        except RunError as exc:  # the store broke meanwhile: it says where it saved the record instead
            print(f"gpuscout: {exc}", file=sys.stderr)
        except UsageError as exc:  # it can no longer be opened: the record is saved beside it, never lost
            rescue = Rescue(Path(self.store_path) if self.store_path else default_store_path())
            rescue.add([self.record], str(exc))
            print(f"gpuscout: {rescue.message()}", file=sys.stderr)
        return self.record


class Keras:
    """Model.fit instrumented for the time of an in-process watch, and Keras' own again after it.
    Keras not imported yet: wrapped the moment the cell imports it (an import hook, removed after)."""

    def __init__(self) -> None:
        self.model_class = None
        self.finder = None

    def __enter__(self) -> Keras:
        module = sys.modules.get(watch_hook.KerasFinder.TARGET)
        if module is not None:
            self._patch(module)
        else:
            self.finder = watch_hook.KerasFinder(loaded=self._patch)
            sys.meta_path.insert(0, self.finder)
        return self

    def _patch(self, module) -> None:
        try:
            watch_hook.patch(module.Model)
            self.model_class = module.Model
        except Exception as exc:  # instrumentation never stops the user's code
            print(f"gpuscout: could not instrument Model.fit ({type(exc).__name__}: {exc})", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if self.model_class is not None:
            watch_hook.unpatch(self.model_class)


class Watching:
    """`with gpuscout.watching() as w:`: every Model.fit inside is watched; `w.record` afterwards.
    Its verdict is shown at the end (rich output in Jupyter, text elsewhere) unless show=False."""

    def __init__(self, label: str | None = None, store: str | Path | None = None, show: bool = True) -> None:
        self.label = label or _caller_label()
        self.store, self.show = store, show
        self.live: InProcess | None = None
        self.keras: Keras | None = None
        self.record: WatchRecord | None = None

    def __enter__(self) -> Watching:
        if watched_by_a_parent():
            print(
                "gpuscout: this process is already watched by `gpuscout watch`/`tune`: its record is the one kept",
                file=sys.stderr,
            )
            return self
        if STATE.sink is not None:
            raise UsageError("gpuscout.watching() is already watching in this process: one watch at a time")
        self.live = InProcess(self.label, self.store).start()
        self.keras = Keras().__enter__()
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self.live is None:
            return
        self.keras.__exit__(kind, value, tb)
        status = "ok" if kind is None else "interrupted" if issubclass(kind, KeyboardInterrupt) else "failed"
        error = "".join(traceback.format_exception(kind, value, tb)) if status == "failed" else ""
        self.record = self.live.finish(status, error)
        if self.show:
            from gpuscout.notebook.display import display, watched

            display(watched(self.record, self.live.store_path))


def watching(label: str | None = None, *, store: str | Path | None = None, show: bool = True) -> Watching:
    """Watch every Keras Model.fit run inside the `with` block, in this process; the record is
    stored (`store`: a path; default: gpuscout's store) and its verdict shown."""
    return Watching(label, store, show)


def callback(label: str | None = None, *, store: str | Path | None = None, show: bool = True):
    """A Keras callback that watches the one fit it is given to (`callbacks=[...]`), for a fit
    that cannot be put under `watching()`; its record is the callback's `.record` after fit."""
    import keras

    from gpuscout.child.watch_fit import FitWatch
    from gpuscout.child.watch_hook import make_callback

    name = label or _caller_label()

    class GpuscoutWatch(keras.callbacks.Callback):
        async_safe = True  # leaves Keras' asynchronous batch-end dispatch as it was

        def __init__(self) -> None:
            super().__init__()
            self.record: WatchRecord | None = None
            self.live: InProcess | None = None
            self.fit = self.inner = None

        def on_train_begin(self, logs=None):
            if STATE.sink is not None or watched_by_a_parent():
                return  # already watched: by watching() around this fit, or by `gpuscout watch`
            self.live = InProcess(name, store).start()
            self.fit = FitWatch(self.model, None)
            emit(
                "watch_fit_begin",
                fit=self.fit.index,
                began_monotonic_s=time.monotonic(),
                epochs=self.params.get("epochs"),
                batch_size=None,
            )
            self.inner = make_callback(self.fit)
            self.inner.set_model(self.model)
            self.inner.set_params(self.params)
            self.inner.on_train_begin(logs)

        def on_epoch_begin(self, epoch, logs=None):
            if self.inner is not None:
                self.inner.on_epoch_begin(epoch, logs)

        def on_test_begin(self, logs=None):
            if self.inner is not None:
                self.inner.on_test_begin(logs)

        def on_epoch_end(self, epoch, logs=None):
            if self.inner is not None:
                self.inner.on_epoch_end(epoch, logs)

        def on_train_end(self, logs=None):
            if self.live is None:
                return
            self.fit.end()
            self.record = self.live.finish("ok")
            self.live = self.fit = self.inner = None
            if show:
                from gpuscout.notebook.display import display, watched

                display(watched(self.record, store))

    return GpuscoutWatch()


def _caller_label() -> str:
    """What the record is listed and compared as: the notebook's file (Jupyter's server names it to
    the kernel in JPY_SESSION_NAME), "notebook" in another kernel, else the script's name. The same
    for every run of a cell, so that `compare` puts a cell before and after a fix side by side."""
    session = os.environ.get("JPY_SESSION_NAME")
    if session:
        return Path(session).name
    if "ipykernel" in sys.modules or "IPython" in sys.modules:
        return "notebook"
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return Path(path).name if path else "python"
