"""Inside a script run by `gpuscout watch`: every Keras `Model.fit` instrumented, no file edited.

The sitecustomize that `gpuscout watch` puts on the script's PYTHONPATH calls `install()` at
interpreter start-up. Keras is not imported then (that would fix its backend before the script
chose one): an import hook waits for `keras.src.models.model` and wraps `Model.fit` once it
exists. Each fit gets a callback (async-safe: it keeps Keras' asynchronous dispatch) and a
timed `train_function` (gpuscout.child.watch_fit); a loop of the script's own is timed through
gpuscout.watch.step (CustomSteps here).

What it sees goes to the parent as events (gpuscout.core.events). A failure in here is reported once
and the training goes on unobserved: instrumentation must never change the user's results.
Only the standard library, Keras and the frameworks are imported here (the script's environment
may lack gpuscout's own dependencies).
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import signal
import sys
import threading
import time

from gpuscout.child import mlflow_run, tf_data, tune_overrides, watch_state
from gpuscout.child.fit_input import training_arguments
from gpuscout.child.watch_fit import FitWatch
from gpuscout.child.watch_state import (
    STATE,
    emit,
    halt,
    interrupted_again,
    limit_reached,
    on_body_end,
    on_exit,
    on_interrupt,
    report_failure,
    trace,
    trace_toggles,
)
from gpuscout.core import steps


def make_callback(fit: FitWatch):
    import keras

    class GpuscoutWatch(keras.callbacks.Callback):
        async_safe = True  # leaves Keras' asynchronous batch-end dispatch as it was

        def on_train_begin(self, logs=None):
            fit.params = dict(self.params or {})
            fit.wrap()
            mlflow_run.tell_active_run()

        def on_epoch_begin(self, epoch, logs=None):
            fit.epoch_begin(epoch)

        def on_test_begin(self, logs=None):  # after Keras made its test_function
            fit.training_ended()
            fit.count_validation()
            fit.validation_began = time.monotonic()

        def on_test_end(self, logs=None):
            if fit.validation_began is not None:
                fit.validation_s += time.monotonic() - fit.validation_began
                fit.validation_began = None

        def on_epoch_end(self, epoch, logs=None):  # the last callback: the user's have run
            fit.epoch_end(epoch, logs)
            if watch_state.LIMITS.whole_epochs and limit_reached(epoch_end=True):
                fit.end()
                halt()

    return GpuscoutWatch()


def make_step_end(fit: FitWatch):
    """The callback put first where a callback of the user's makes Keras wait for each step's
    logs: Keras calls it right after that wait, the step's end (FitWatch.step_ended). Not
    async_safe, like the user's callback that made Keras wait: it is added only then, and so never
    changes how Keras dispatches."""
    import keras

    class GpuscoutStepEnd(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            fit.step_ended()

    return GpuscoutStepEnd()


def patch(model_class) -> None:
    original = model_class.fit
    if getattr(original, "_gpuscout_watched", False):
        return
    compile_ = model_class.compile

    def compile(self, *args, **kwargs):
        try:
            self._gpuscout_compiled_at = caller_site()  # where `tune --patch` sets XLA, steps_per_execution
            if tune_overrides.wanted():  # `gpuscout tune -- COMMAND`
                kwargs = tune_overrides.compile_kwargs(kwargs)
                tune_overrides.remember_compile(self, args, kwargs)
        except Exception as exc:
            report_failure("applying a tune change at compile", exc)
        return compile_(self, *args, **kwargs)

    compile.__wrapped__ = compile_
    compile._gpuscout_watched = True
    model_class.compile = compile

    def fit(self, *args, **kwargs):
        if STATE.limit_reached:
            return original(self, *args, **kwargs)
        model = self
        if tune_overrides.wanted():
            try:
                args, kwargs = tune_overrides.fit_input(args, kwargs, self)
                model = tune_overrides.model_for_fit(self)
            except Exception as exc:
                report_failure("applying a tune change at fit", exc)
        try:
            callbacks = kwargs.get("callbacks") or []
            if not isinstance(callbacks, (list, tuple)):
                raise TypeError(f"callbacks given as {type(callbacks).__name__}, not a list")
            watcher = FitWatch(model, args[0] if args else kwargs.get("x"), callbacks, caller_site())
            args, kwargs = watcher.observed_input(args, kwargs)
            # the parent waits for the child's own limit now; a fit whose first step never ends is told by it
            emit(
                "watch_fit_begin",
                fit=watcher.index,
                began_monotonic_s=time.monotonic(),
                epochs=kwargs.get("epochs"),
                batch_size=kwargs.get("batch_size"),
                **training_arguments(original, model, args, kwargs),
            )
            first = [make_step_end(watcher)] if watcher.sync_callbacks else []
            kwargs["callbacks"] = [*first, *callbacks, make_callback(watcher)]
        except Exception as exc:
            report_failure("preparing fit", exc)
            return original(model, *args, **kwargs)
        try:
            return original(model, *args, **kwargs)
        finally:
            try:
                watcher.end()
            except Exception as exc:
                report_failure("ending fit", exc)

    fit._gpuscout_watched = True
    fit.__wrapped__ = original
    fit.__doc__ = original.__doc__
    model_class.fit = fit


def unpatch(model_class) -> None:
    """Model.fit and Model.compile as Keras defined them (the end of an in-process watch)."""
    for name in ("fit", "compile"):
        method = vars(model_class).get(name)
        if getattr(method, "_gpuscout_watched", False):
            setattr(model_class, name, method.__wrapped__)


def caller_site() -> dict | None:
    """The file and line that called the wrapped method (two frames up: past the wrapper)."""
    frame = sys._getframe(2)
    return {"file": frame.f_code.co_filename, "line": frame.f_lineno}


def instrument(module) -> None:
    """Keras' model module has just been executed: its Model wrapped, tune's policy set."""
    try:
        patch(module.Model)
        tune_overrides.on_keras(module)
    except Exception as exc:
        report_failure("instrumenting keras.Model.fit", exc)


class LoadedFinder(importlib.abc.MetaPathFinder):
    """Calls `loaded(module)` the moment the module `target` has been executed."""

    def __init__(self, target: str, loaded) -> None:
        self.target, self.loaded = target, loaded

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            self.loaded(module)

        spec.loader.exec_module = exec_and_patch
        return spec


class KerasFinder(LoadedFinder):
    """Keras' model module: its Model instrumented (instrument) once it exists."""

    TARGET = "keras.src.models.model"

    def __init__(self, loaded=instrument) -> None:
        super().__init__(self.TARGET, loaded)


def instrument_tf_data(module) -> None:
    """TensorFlow's dataset module has just been executed: the builders of a pipeline wrapped."""
    try:
        tf_data.install(module)
    except Exception as exc:
        report_failure("instrumenting tf.data", exc)


class CustomSteps:
    """gpuscout.watch.step() in a training loop of the script's own: windows of LIMITS.window_s between
    calls. The first call ends the first step (it holds the compilation): windows start there.
    What is left of the last window is sent when the process exits."""

    def __init__(self) -> None:
        self.start = None
        self.steps = self.samples = self.index = 0
        self.counted = True  # every call said how many samples
        self.last = None  # the latest call's time
        self.traced = False  # the current window's steps run under the profiler

    def __call__(self, samples: int | None) -> None:
        interrupted_again()
        now = time.monotonic()
        STATE.steps += 1
        if STATE.first_step is None:
            STATE.first_step = now
        if self.start is None:
            self.start = now
            STATE.timed_from = STATE.timed_from or now
            emit("watch_custom_start", start_monotonic_s=now)
            atexit.register(self.flush)
        else:
            self.steps += 1
            self.counted = self.counted and samples is not None
            self.samples += samples or 0
            self.last = now
            if now - self.start >= watch_state.LIMITS.window_s:
                self.flush()
        if trace_toggles(STATE.steps + 1):  # --trace-steps: the traced steps get a window of their own
            self.flush()
            trace(STATE.steps + 1)
            self.start = self.last = time.monotonic()
            self.traced = STATE.tracing
        if limit_reached():
            self.flush()
            halt()

    def flush(self) -> None:
        if not self.steps:
            return
        emit(
            "watch_window",
            fit=None,
            index=self.index,
            start_monotonic_s=self.start,
            end_monotonic_s=self.last,
            steps=self.steps,
            samples=self.samples if self.counted else None,
            input_wait_s=None,
            outside_step_s=None,
            traced=self.traced,
        )
        self.index += 1
        self.start, self.steps, self.samples = self.last, 0, 0


def install() -> None:
    """Called by the injected sitecustomize; never raises."""
    try:
        emit("watch_hooked", python=sys.version.split()[0], argv=sys.argv[:8])
        if KerasFinder.TARGET in sys.modules:
            instrument(sys.modules[KerasFinder.TARGET])
        else:
            sys.meta_path.insert(0, KerasFinder())
        if tf_data.TARGET in sys.modules:
            instrument_tf_data(sys.modules[tf_data.TARGET])
        else:
            sys.meta_path.insert(0, LoadedFinder(tf_data.TARGET, instrument_tf_data))
        steps.set_step_handler(CustomSteps())
        atexit.register(on_exit)  # first registered, last run: after the script's own handlers
        # threading's exit hooks run when the script's code has, before any atexit handler
        # (CPython's finalisation: threading._shutdown, then the atexit callbacks)
        threading._register_atexit(on_body_end)
        signal.signal(signal.SIGINT, on_interrupt)  # before the script runs: its own handler, if any, wins
    except Exception as exc:
        report_failure("installing the instrumentation", exc)
