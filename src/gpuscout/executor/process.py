"""The one child-process runner: measuring children, sweep trials, the doctor's probes and watched
scripts all start here.

Each child runs in a new session (its own process group): Ctrl-C reaches only gpuscout, which then
stops the whole group, so no grandchild (a tf.data worker, a compiler, a user's subprocess) is left
behind. A watchdog stops the group at the timeout or when the caller cancels. Events come over a
pipe of their own (gpuscout.events); stdout and stderr go wherever the caller points them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Callable

from gpuscout import events

# Seconds between SIGTERM and SIGKILL when stopping a child's process group.
TERM_GRACE_S = 3.0
# How often the watchdog looks at the child, the clock and the cancel flag.
POLL_S = 0.2


@dataclass
class Finished:
    """How a child process ended."""

    returncode: int | None
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False
    events: list[dict] = field(default_factory=list)


def kill_group(pgid: int) -> None:
    """SIGTERM the group, then SIGKILL whatever is left of it."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    timeout_s: float | None,
    stdout: IO | int | None,
    stderr: IO | int | None,
    on_event: Callable[[dict], None] = lambda event: None,
    on_start: Callable[[int], None] = lambda pid: None,
    cancel: threading.Event | None = None,
) -> Finished:
    """Run `argv` to its end (or its timeout, or `cancel`), then stop whatever is left of its
    process group. `stdout`/`stderr`: an open file, subprocess.DEVNULL, or None to share ours.
    Raises OSError when the program cannot be started; Ctrl-C stops the group and propagates."""
    events_read, events_write = os.pipe()
    seen: list[dict] = []

    def keep(event: dict) -> None:
        seen.append(event)
        on_event(event)

    started = time.monotonic()
    with open(events_read, "rb") as channel:
        try:
            proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                    env={**env, events.EVENTS_FD_ENV: str(events_write)},
                                    pass_fds=(events_write,), start_new_session=True)
        finally:
            os.close(events_write)  # the child holds it now: EOF once it and its own children are gone
        reader = threading.Thread(target=events.read, args=(channel, keep), daemon=True,
                                  name="gpuscout-events")
        timed_out = cancelled = False
        try:  # from the moment the child exists: a Ctrl-C anywhere below still stops its group
            reader.start()
            on_start(proc.pid)
            deadline = None if timeout_s is None else started + timeout_s
            while proc.poll() is None:
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    break
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                wait = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # Grandchildren can outlive a child that exited; the group id still names them.
            kill_group(proc.pid)
            proc.wait()
            if reader.ident is not None:  # started
                reader.join(timeout=5)
    return Finished(proc.returncode, time.monotonic() - started, timed_out, cancelled, list(seen))


def run_captured(argv: list[str], *, env: dict[str, str], timeout_s: float | None,
                 tail_chars: int = 4000) -> tuple[Finished, str]:
    """run() with stdout and stderr kept (a temporary file, never a pipe a chatty child could
    fill); returns how it ended and the last `tail_chars` characters of that output."""
    with tempfile.TemporaryFile() as output:
        finished = run(argv, env=env, timeout_s=timeout_s, stdout=output, stderr=output)
        output.seek(0)
        return finished, output.read().decode("utf-8", errors="replace")[-tail_chars:]
