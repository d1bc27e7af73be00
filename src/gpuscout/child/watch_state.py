"""What the instrumentation of a watched script shares across its fits: the settings gpuscout
passed in the environment, the process's counters, the events it sends, the --steps/--duration
limit and the profiler trace (gpuscout.child.watch_hook installs it; watch_fit times each fit).
Only the standard library and, lazily, Keras and the frameworks are imported here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gpuscout.core import events, frameworks
from gpuscout.executor.guard import write_whole


@dataclass(frozen=True)
class Limits:
    """What gpuscout asked of this run in its environment (GPUSCOUT_WATCH_*): read as the process
    starts, and again (read_environment) when a warm interpreter's fork becomes a run
    (executor/zygote.py), whose environment is then the run's own."""

    window_s: float = 1.0
    # windows of this many steps instead of window_s seconds (`tune`: every run of a session has the
    # same steps, and so the same number of windows however fast a change makes it)
    window_steps: int | None = None
    # whether a Python input's batches repeat is checked (child/input_repeats.py); tune's runs after
    # its first baseline turn it off
    check_repeats: bool = True
    # tune's first baseline: the PyDataset's per-sample function called again to tell it as layers
    tell_augmentation: bool = False
    max_steps: int | None = None
    # tune's runs of whole epochs: the --steps limit is met at the end of the epoch that reaches it
    # (its validation and callbacks run), so every epoch of the run is whole and timed as the user's
    # clock times it; past twice the steps it is met wherever the run is (an epoch far longer than
    # the one asked for: a change that made it so)
    whole_epochs: bool = False
    max_seconds: float | None = None
    trace_dir: str | None = None
    # (first, last) training steps to trace, parsed once: every training step asks whether the
    # profiler starts or stops before the next
    trace_steps: tuple[int, int] | None = None

    def window_ends(self, steps: int, seconds: float) -> bool:
        """Whether a window that has run `steps` training steps in `seconds` is full."""
        return steps >= self.window_steps if self.window_steps else seconds >= self.window_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        trace, trace_dir = env.get("GPUSCOUT_WATCH_TRACE"), env.get("GPUSCOUT_WATCH_TRACE_DIR")
        first, _, last = (trace or "").partition(":")
        return cls(
            window_s=float(env.get("GPUSCOUT_WATCH_WINDOW_S", "1.0")),
            window_steps=int(env.get("GPUSCOUT_WATCH_WINDOW_STEPS", "0")) or None,
            check_repeats=env.get("GPUSCOUT_WATCH_REPEATS", "1") != "0",
            tell_augmentation=env.get("GPUSCOUT_WATCH_AUGMENTATION") == "1",
            max_steps=int(env.get("GPUSCOUT_WATCH_STEPS", "0")) or None,
            whole_epochs=env.get("GPUSCOUT_WATCH_WHOLE_EPOCHS") == "1",
            max_seconds=float(env.get("GPUSCOUT_WATCH_SECONDS", "0")) or None,
            trace_dir=trace_dir,
            trace_steps=(int(first), int(last)) if trace and trace_dir else None,
        )


LIMITS = Limits.from_env(os.environ)


def read_environment() -> None:
    """This process's limits from its environment as it is now (a warm interpreter's fork, once it
    holds the run's environment)."""
    global LIMITS
    LIMITS = Limits.from_env(os.environ)


events.on_environment(read_environment)


# A process halted at the limit waits this long for gpuscout to end its process group, then
# ends itself (gpuscout gone, or a process of the script that has no channel to it).
HALT_WAIT_S = 60.0


class _State:
    """What one process has seen across its fits."""

    def __init__(self) -> None:
        self.fits = 0
        self.steps = 0  # training batches, all fits together
        self.first_step = None  # time.monotonic() of the first
        self.timed_from = None  # ... of the first step's end (after the compile): --duration counts from it
        self.limit_reached = False
        self.failed = False
        self.tracing = False
        self.silent = False  # no channel to the parent in this process
        self.interrupted = False  # SIGINT reached this process (gpuscout passes Ctrl-C and SIGTERM on as SIGINT)
        # In-process watching (gpuscout.notebook.live: a notebook's cell): the events go to this
        # function of the same process instead of a pipe to a parent
        self.sink = None

    def reset(self, sink=None) -> None:
        """A fresh count for an in-process watch (its fits numbered from 1), its events to `sink`."""
        self.__init__()
        self.sink = sink


STATE = _State()


def is_pydataset(x) -> bool:
    """A keras.utils.PyDataset (by name: the script imports Keras, this module does not)."""
    return any(base.__name__ == "PyDataset" for base in type(x).__mro__)


def emit(kind: str, **fields) -> None:
    """To the parent, never to the script's output: without gpuscout's channel (a process that
    inherited the environment but not the pipe) nothing is sent."""
    if STATE.sink is not None:
        STATE.sink({"event": kind, "pid": os.getpid(), **fields})
        return
    if STATE.silent or events.EVENTS_FD_ENV not in os.environ:
        return
    try:
        events.emit({"event": kind, "pid": os.getpid(), **fields})
    except Exception:  # no channel in this process, or the parent is gone: stay silent
        STATE.silent = True


def report_failure(where: str, exc: BaseException) -> None:
    """Once per process: gpuscout's own failure, never the script's."""
    if not STATE.failed:
        STATE.failed = True
        emit("watch_error", message=f"{where}: {type(exc).__name__}: {exc}"[:500])


def limit_reached(epoch_end: bool = False) -> str | None:
    """Why the run stops here, or None; `epoch_end`: called at an epoch's end (Limits.whole_epochs)."""
    if STATE.limit_reached:
        return "already"
    reason = None
    limits = LIMITS
    asked = limits.max_steps
    steps = asked if not limits.whole_epochs or epoch_end or asked is None else 2 * asked
    if steps is not None and STATE.steps >= steps:
        reason = f"{steps} training steps" + (", at the end of an epoch" if epoch_end else "")
    elif (
        limits.max_seconds is not None
        and STATE.timed_from is not None
        and time.monotonic() - STATE.timed_from >= limits.max_seconds
    ):
        reason = f"{limits.max_seconds:g} s of training"
    if reason:
        STATE.limit_reached = True
        emit("watch_limit", reason=reason, steps=STATE.steps)
    return reason


def halt() -> None:
    """--steps/--duration reached and what was measured sent: nothing more of the script runs.

    Stopping fit (`stop_training`) would still run the epoch's validation and its callbacks (a
    ModelCheckpoint overwrites the user's best model with a 60-step one) and then the script's
    code after fit; an exception would print a traceback and run the script's `finally` blocks
    and jax's atexit handlers. Instead this process tells gpuscout it has stopped and waits
    here, in gpuscout's code, for gpuscout to end its process group (the shell's next command
    and the script's subprocesses with it). Ctrl-C is ignored and SIGTERM does what it does
    by default meanwhile, so no handler of the script's runs either. A process outside that group
    (a notebook's kernel: jupyter_client starts it in a session of its own) ends as soon as the
    process that started it has been ended."""
    stop_trace()
    emit("watch_halt", steps=STATE.steps, frameworks=frameworks.imported())
    if STATE.silent:  # nobody to end it: end here, running nothing more
        os._exit(0)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the main thread: its handlers stay (gpuscout's SIGKILL follows)
        pass
    deadline, parent = time.monotonic() + HALT_WAIT_S, os.getppid()
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.05)
    os._exit(0)  # also when its parent ended first: a notebook's kernel, in a session of its own


def on_body_end() -> None:
    """Once the script's own code has run, before any atexit handler (threading's exit hooks run
    first, in the interpreter's shutdown): a sweep trial is finished from here on, whatever its
    exit handlers and the interpreter still do; a driver killed while they run leaves a trial that
    `--resume` takes as finished, never runs again (sweep/attempts.py)."""
    mark_done(_uncaught(), "body")


def on_exit() -> None:
    """At exit, registered before the script runs, so after the script's and the frameworks' own
    atexit handlers: a process that trained says that all its code has run and only the
    interpreter's shutdown is left, which gpuscout gives EXIT_GRACE_S (executor/process.py; under
    TensorFlow 2.21 a tf.data iterator over tf.py_function can make it wait forever). Whether an
    uncaught exception ended the script goes with it: that process failed, however it ends."""
    uncaught = _uncaught()
    if STATE.steps:
        # "watch_exiting" is gpuscout.measure.command.EXITING_EVENT (the parent side's module)
        # and the frameworks it imported: a sweep's warm interpreter imports them for the next trials
        emit(
            "watch_exiting",
            steps=STATE.steps,
            uncaught=type(uncaught).__name__ if uncaught else None,
            frameworks=frameworks.imported(),
        )
    mark_done(uncaught, "exit")


def _uncaught() -> BaseException | None:
    return getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)


def mark_done(uncaught: BaseException | None, phase: str) -> None:
    """In a sweep trial's own process (the one its guard started: its parent leads the process
    group), once all of the script's code has run (`phase` "body": its exit handlers are still to
    run; "exit": they have run too): a file that says so, written whole and synced. A driver killed
    from the body's end on (SIGKILL, a node's loss) leaves a trial that `--resume` takes as
    finished from its files, never runs again; before, only the guard's exit status said so, and a
    shutdown that lingered past the guard's grace lost it. Whether an uncaught exception ended the
    script goes with it."""
    path = os.environ.get(events.TRIAL_DONE_ENV)
    try:
        if not path or os.getppid() != os.getpgid(0):
            return
    except OSError:
        return
    write_whole(  # in the room the sweep reserved for it (executor/guard.reserve): a full disk takes it
        path,
        json.dumps(
            {
                "pid": os.getpid(),
                "uncaught": type(uncaught).__name__ if uncaught else None,
                "phase": phase,
                "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ),
    )


def on_interrupt(signum, frame) -> None:
    """SIGINT in a watched script: KeyboardInterrupt, as Python's own handler raises it (installed
    explicitly: a script started from a background job inherits SIGINT ignored). It is also
    remembered, so that where a framework's code swallows the KeyboardInterrupt (fit on jax, in a
    wait on the device), the next training step raises it again in the script's main thread and
    the script's own cleanup (`finally`, its KeyboardInterrupt handler) runs before the grace ends."""
    STATE.interrupted = True
    raise KeyboardInterrupt


def interrupted_again() -> None:
    """At a step's start: an interrupt that a framework swallowed is raised again here. The script
    is being stopped (gpuscout ends it after the grace): no training step runs after a SIGINT."""
    if STATE.interrupted:
        raise KeyboardInterrupt


def trace_toggles(step: int) -> bool:
    """Whether the profiler starts or stops before `step` (the timing windows close around it: the
    profiler's start-up and the traced steps' overhead are not the script's step time)."""
    if LIMITS.trace_steps is None:
        return False
    first, last = LIMITS.trace_steps
    return (step == first and not STATE.tracing) or (step == last + 1 and STATE.tracing)


def trace(step: int) -> None:
    """Start or stop the framework's profiler at the steps --trace-steps asked for."""
    if not trace_toggles(step):
        return
    first, last = LIMITS.trace_steps or (0, 0)
    try:
        import keras

        backend = keras.backend.backend()
        if not STATE.tracing:
            if backend == "jax":
                import jax

                # the perfetto JSON beside the xplane: gpuscout reads each GPU's kernels from it
                # (measure/trace_kernels.py) after the run
                jax.profiler.start_trace(LIMITS.trace_dir, create_perfetto_trace=True)
            else:
                import tensorflow as tf

                tf.profiler.experimental.start(LIMITS.trace_dir)
            STATE.tracing = True
        else:
            stop_trace()
    except Exception as exc:
        STATE.tracing = False
        emit(
            "watch_trace",
            dir=LIMITS.trace_dir,
            first_step=first,
            last_step=last,
            ok=False,
            message=f"{type(exc).__name__}: {exc}"[:300],
        )


def stop_trace() -> None:
    if not STATE.tracing:
        return
    STATE.tracing = False
    import keras

    if keras.backend.backend() == "jax":
        import jax

        jax.profiler.stop_trace()
    else:
        import tensorflow as tf

        tf.profiler.experimental.stop()
    first, last = LIMITS.trace_steps or (0, 0)
    emit("watch_trace", dir=LIMITS.trace_dir, first_step=first, last_step=last, ok=True, message=None)
