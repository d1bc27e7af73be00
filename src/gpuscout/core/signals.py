"""The signals that stop a gpuscout command, each handled as Ctrl-C is.

- SIGINT is handled explicitly: a process started in the background of a non-interactive shell
  (`gpuscout watch ... &` in a script) inherits SIGINT ignored, and could not be stopped with it.
- SIGTERM (a job scheduler's time limit, `kill`, a container's stop) raises `Terminated`, a
  KeyboardInterrupt: every path that keeps what was measured on Ctrl-C (a watched script's
  record, a sweep's finished trials, temporary folders removed) does the same for it, and the
  command exits 128 + the signal's number (130, 143), as a shell reports a process it stopped.
"""

from __future__ import annotations

import signal
import threading

received: int | None = None  # the last stop signal that reached gpuscout


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be."""


def _on_signal(signum: int, frame) -> None:
    global received
    received = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def install() -> None:
    """Called at the start of every command (in the main thread; elsewhere Python cannot)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)


def ending() -> None:
    """The command is ending because a stop signal came: another Ctrl-C (users press it twice) is
    ignored from here, so it cannot kill the process between its last words and its exit status
    (an uncaught KeyboardInterrupt there ends Python by SIGINT itself: -2, not 130)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def name() -> str:
    return signal.Signals(received).name if received else "SIGINT"


def exit_code() -> int:
    """128 + the stop signal: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + (received or signal.SIGINT)
