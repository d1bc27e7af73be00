"""The parent/child event protocol: how a process gpuscout starts tells gpuscout what happens.

The child writes one JSON object per line, {"event": KIND, ...}, to a pipe the parent opened for
it; it finds the pipe's file descriptor in GPUSCOUT_EVENTS_FD. A pipe of its own rather than
stdout: frameworks and user code print what they like on stdout and stderr (raw bytes too), and
none of it can be taken for an event or stop the reader. The parent decodes with replacement
and skips every line that is not a JSON object, so a child is judged by its events alone.

Both sides import this module; it imports nothing of gpuscout's.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import BinaryIO

EVENTS_FD_ENV = "GPUSCOUT_EVENTS_FD"
# The pipe's identity (st_dev:st_ino), beside its number: a grandchild inherits the environment
# but not always the descriptor (Python's subprocess closes it), and there the number may name
# a file of the user's, which must never receive an event.
EVENTS_ID_ENV = "GPUSCOUT_EVENTS_ID"
# A sweep trial's file that its own process writes once all of the script's code has run
# (child/watch_state.mark_done; sweep/attempts.AttemptFiles.done reads it)
TRIAL_DONE_ENV = "GPUSCOUT_TRIAL_DONE"

_channel = None
# What the child's modules read of their environment once, at import (the instrumentation's
# limits, tune's settings): read again when a warm interpreter's fork becomes a run
# (executor/zygote.py sets the run's environment, then calls environment_changed)
_readers: list[Callable[[], None]] = []


def on_environment(read: Callable[[], None]) -> None:
    """Child side: `read` runs again whenever this process takes another environment."""
    _readers.append(read)


def environment_changed() -> None:
    """Child side: this process now runs under another environment (a fork given a run's own)."""
    for read in _readers:
        read()


def pipe_id(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


def channel_env(fd: int) -> dict[str, str]:
    """Parent side: the environment that names the pipe `fd` to the child."""
    return {EVENTS_FD_ENV: str(fd), EVENTS_ID_ENV: pipe_id(fd)}


def _open_channel():
    fd = os.environ.get(EVENTS_FD_ENV)
    if not fd:
        return sys.stdout
    expected = os.environ.get(EVENTS_ID_ENV)
    try:
        if expected is not None and pipe_id(int(fd)) != expected:
            raise OSError("not the pipe gpuscout opened")
    except (OSError, ValueError) as exc:
        raise OSError(f"no gpuscout event channel here ({exc})") from None
    return os.fdopen(int(fd), "w", encoding="utf-8", buffering=1, closefd=False)


def emit(event: dict) -> None:
    """Child side: send one event. Without a channel (a worker started by hand) it goes to stdout;
    OSError when the environment names a channel this process does not hold."""
    global _channel
    if _channel is None:
        _channel = _open_channel()
    _channel.write(json.dumps(event) + "\n")
    _channel.flush()


def parse(raw: bytes) -> dict | None:
    """One line of the channel as an event, or None for anything that is not one."""
    try:
        event = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


def read(stream: BinaryIO, on_event: Callable[[dict], None]) -> None:
    """Parent side: call `on_event` for each event until the channel closes. A callback that
    raises is ignored: a display must never stop a measurement."""
    for raw in stream:
        event = parse(raw)
        if event is None:
            continue
        try:
            on_event(event)
        except Exception:
            pass
