"""The one child-process runner: measuring children, sweep trials, the doctor's probes and watched
scripts all start here.

Each child runs in a new session (its own process group) under a guard (executor/guard.py) that
kills the group when gpuscout dies, however it dies: no child and no grandchild (a tf.data worker,
a compiler, a user's subprocess) outlives gpuscout. Ctrl-C reaches only gpuscout, which then stops
the whole group (or passes it on, for a watched script). A watchdog stops the group at the timeout
or when the caller cancels. Events come over a pipe of their own (gpuscout.core.events); stdout and
stderr go wherever the caller points them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gpuscout.core import events

GUARD = Path(__file__).resolve().parent / "guard.py"
# Seconds between SIGTERM and SIGKILL when stopping a child's process group.
TERM_GRACE_S = 3.0
# How often the watchdog looks at the child, the clock and the cancel flag.
POLL_S = 0.2
# A child that has sent its last event (`last_events`: a measuring child's result or error, a
# watched script's process that trained and has run all its code) has only its exit left; one
# still there this long after is stopped and what it sent is kept. A tf.data iterator over a
# Python function, finalised at interpreter shutdown, made a child that had sent its result wait
# forever under TensorFlow 2.21 (tensorflow#21277); its exit takes ~1 s. GPUSCOUT_EXIT_GRACE_S
# sets another (a framework that takes longer to shut down; the tests, which wait it out).
EXIT_GRACE_ENV = "GPUSCOUT_EXIT_GRACE_S"


def _exit_grace_s(default: float = 20.0) -> float:
    try:
        value = float(os.environ.get(EXIT_GRACE_ENV, default))
    except ValueError:
        return default
    return value if 0 < value <= 3600 else default


EXIT_GRACE_S = _exit_grace_s()


@dataclass
class Finished:
    """How a child process ended."""

    returncode: int | None
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False
    events: list[dict] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C reached gpuscout and was passed on (forward_interrupt)
    lingered: bool = False  # it sent its last event, did not exit within EXIT_GRACE_S and was stopped


# Where a child's stdout or stderr goes: an open file, subprocess.DEVNULL, None (ours), or a
# function handed each chunk of bytes as it comes (run() drains a pipe of its own into it).
Sink = IO | int | None | Callable[[bytes], None]


def process_tree(root: int) -> set[int]:
    """`root` and its descendants now (none when it is gone): a child's pid is its guard's, and
    NVML lists the processes under it."""
    import psutil

    try:
        return {root, *(child.pid for child in psutil.Process(root).children(recursive=True))}
    except psutil.Error:
        return set()


def kill_group(pgid: int, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, then SIGKILL whatever is left of it. `leader`: the group's first process,
    our own child, reaped while we wait."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 0.0)):
        if _signal_and_wait(pgid, sig, grace, leader):
            return


def _signal_and_wait(pgid: int, sig: int, grace_s: float, leader: subprocess.Popen | None = None) -> bool:
    """Send `sig` to the group; True once no process of it can run any more (within `grace_s`)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return True
    deadline = time.monotonic() + grace_s
    while True:
        if leader is not None:
            leader.poll()
        if not group_running(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def group_running(pgid: int) -> bool:
    """Whether a process of the group is alive. A zombie is not: it has ended and waits only to be
    reaped, by its parent or, once orphaned, by PID 1, which in a container may take seconds (a
    stopped script's orphaned process waited 1.6 s for it here) or never come."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return False


def stop_group(proc: subprocess.Popen, interrupt_first_s: float = 0.0) -> None:
    """Stop a child and its group: SIGINT first when `interrupt_first_s` > 0 (a training script
    then ends as on Ctrl-C: its own handlers and `finally` blocks run), then SIGTERM, SIGKILL."""
    if interrupt_first_s > 0 and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=interrupt_first_s)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    # Grandchildren can outlive a child that exited; the group id still names them.
    kill_group(proc.pid, proc)


class _Drain(threading.Thread):
    """Reads a pipe to its end, handing each chunk to a sink function."""

    def __init__(self, fd: int, sink: Callable[[bytes], None]) -> None:
        super().__init__(daemon=True, name="gpuscout-output")
        self.fd, self.sink = fd, sink

    def run(self) -> None:
        with open(self.fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                try:
                    self.sink(chunk)
                except Exception:  # a display must never stop the child (a full pipe would)
                    pass


def _pipe_for(sink: Sink) -> tuple[Sink, _Drain | None]:
    """What Popen gets for a sink, and the thread that drains it when the sink is a function."""
    if not callable(sink):
        return sink, None
    read_end, write_end = os.pipe()
    return write_end, _Drain(read_end, sink)


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    timeout_s: float | None,
    stdout: Sink,
    stderr: Sink,
    on_event: Callable[[dict], None] = lambda event: None,
    on_start: Callable[[int], None] = lambda pid: None,
    cancel: threading.Event | None = None,
    interrupt_first_s: float = 0.0,
    forward_interrupt: bool = False,
    status_file: Path | None = None,
    stop_now: threading.Event | None = None,
    last_events: tuple[str, ...] = (),
    start: Callable | None = None,
) -> Finished:
    """Run `argv` to its end (or its timeout, or `cancel`), then stop whatever is left of its
    process group (SIGINT first for `interrupt_first_s` when that is > 0). Raises OSError when the
    program cannot be started. Ctrl-C stops the group and propagates; with `forward_interrupt`
    it is passed on to the group as SIGINT instead, the child gets `interrupt_first_s` to end
    (a second Ctrl-C stops it at once), and run() returns with `interrupted` set. `status_file`:
    where the guard writes the exit status the moment the child ends (a sweep's trials: a driver
    resumed after gpuscout died learns which finished). `stop_now`: like `cancel`, but the group is
    ended at once, without SIGINT (a watched script that halted itself at its limit: nothing of
    it may run any more). `last_events`: the events after which the child has EXIT_GRACE_S to
    exit before it is stopped (`lingered`); an event that names its `pid` gives that process the
    grace, and if it has exited by then, the rest of the group runs on. `start`: how else to start
    it, called with (env, stdout, stderr, the event channel's fd, status_file) and returning a
    Popen-like process that leads its group and is guarded as guard.py guards (executor/warm.py:
    forked from a warm interpreter), or None for the cold start below."""
    events_read, events_write = os.pipe()
    seen: list[dict] = []
    state = {
        "timed_out": False,
        "cancelled": False,
        "interrupted": 0.0,  # interrupted: its grace's end
        "now": False,
        "last_event_at": 0.0,
        "last_pid": None,
        "lingered": False,
    }

    def keep(event: dict) -> None:
        seen.append(event)
        if event.get("event") in last_events:
            state["last_event_at"], state["last_pid"] = time.monotonic(), event.get("pid")
        on_event(event)

    started = time.monotonic()
    (out, out_drain), (err, err_drain) = _pipe_for(stdout), _pipe_for(stderr)
    drains = [d for d in (out_drain, err_drain) if d is not None]
    with open(events_read, "rb") as channel:
        try:
            proc = start(env, out, err, events_write, status_file) if start is not None else None
            if proc is None:
                guard = [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(status_file or "-"), "--"]
                proc = subprocess.Popen(
                    [*guard, *argv],
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    env={**env, **events.channel_env(events_write)},
                    pass_fds=(events_write,),
                    start_new_session=True,
                )
        finally:
            # the child holds these now: EOF once it and its own children are gone
            for fd in (events_write, *(d for d, drain in ((out, out_drain), (err, err_drain)) if drain)):
                os.close(fd)
            if sys.exc_info()[0] is not None:
                for drain in drains:
                    os.close(drain.fd)
        reader = threading.Thread(target=events.read, args=(channel, keep), daemon=True, name="gpuscout-events")
        try:  # from the moment the child exists: a Ctrl-C anywhere below still stops its group
            reader.start()
            for drain in drains:
                drain.start()
            on_start(proc.pid)
            _wait(proc, started, timeout_s, cancel, state, forward_interrupt, interrupt_first_s, stop_now)
        finally:
            stop_group(proc, 0.0 if state["interrupted"] or state["now"] else interrupt_first_s)
            proc.wait()
            for thread in (reader, *drains):
                if thread.ident is not None:  # started
                    thread.join(timeout=5)
    failed = next((e for e in seen if e.get("event") == "exec_failed"), None)
    if failed is not None:  # what Popen itself would have raised
        raise OSError(failed.get("errno"), failed.get("message"))
    return Finished(
        proc.returncode,
        time.monotonic() - started,
        state["timed_out"],
        state["cancelled"],
        list(seen),
        bool(state["interrupted"]),
        state["lingered"],
    )


def _wait(
    proc: subprocess.Popen,
    started: float,
    timeout_s: float | None,
    cancel: threading.Event | None,
    state: dict,
    forward_interrupt: bool,
    interrupt_grace_s: float,
    stop_now: threading.Event | None = None,
) -> None:
    """Until the child ends, times out or is cancelled (`state` says which); a forwarded Ctrl-C
    gives it `interrupt_grace_s` more (a second Ctrl-C: none)."""
    deadline = None if timeout_s is None else started + timeout_s
    while proc.poll() is None:
        now = time.monotonic()
        if state["interrupted"] and now >= state["interrupted"]:
            return  # it had its grace: stop_group ends it
        if deadline is not None and now >= deadline and not state["interrupted"]:
            state["timed_out"] = True
            return
        if stop_now is not None and stop_now.is_set():
            state["cancelled"] = state["now"] = True
            return
        if state["last_event_at"] and now - state["last_event_at"] >= EXIT_GRACE_S:
            if _still_running(state["last_pid"]):
                state["lingered"] = state["now"] = True
                return
            state["last_event_at"] = 0.0  # the process that sent it exited: the rest of the group runs on
        if cancel is not None and cancel.is_set():
            state["cancelled"] = True
            return
        try:
            ticking = deadline is not None and not state["interrupted"]
            poll_s = 0.05 if stop_now is not None else POLL_S  # a halted script waits on us: answer it at once
            proc.wait(timeout=min(poll_s, max(0.0, deadline - now)) if ticking else poll_s)
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt:
            if not forward_interrupt or state["interrupted"]:
                raise
            state["interrupted"] = time.monotonic() + interrupt_grace_s  # when its grace ends
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                return


def _still_running(pid: int | None) -> bool:
    """Whether the process that sent a last event is still there (None: the child itself, which is)."""
    if pid is None:
        return True
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone
        return False


def run_captured(
    argv: list[str], *, env: dict[str, str], timeout_s: float | None, tail_chars: int = 4000
) -> tuple[Finished, str]:
    """run() with stdout and stderr kept (a temporary file, never a pipe a chatty child could
    fill); returns how it ended and the last `tail_chars` characters of that output."""
    with tempfile.TemporaryFile() as output:
        finished = run(argv, env=env, timeout_s=timeout_s, stdout=output, stderr=output)
        output.seek(0)
        return finished, output.read().decode("utf-8", errors="replace")[-tail_chars:]
