"""What a display of a watched command is told (report/watch.py draws it)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscout.core.watch_events import WatchEvent
    from gpuscout.executor.process import Sink
    from gpuscout.measure.command import Command
    from gpuscout.measure.gpus import GpuWatch


class View:
    """What a display is told while a command is watched. This default shows nothing of its
    own and passes the command's output through unchanged."""

    def started(self, command: Command, pid: int, gpus: GpuWatch | None) -> None: ...
    def event(self, event: WatchEvent) -> None: ...
    def note(self, text: str) -> None: ...
    def stopped(self) -> None: ...

    def stdout(self) -> Sink:
        """Where the command's stdout goes: None is ours, byte for byte."""
        return None

    def stderr(self, chunk: bytes) -> None:
        sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()
