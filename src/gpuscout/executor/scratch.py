"""Temporary folders of gpuscout's runs (a child's spec and output, a watch's instrumentation).

Each is named with the pid of the gpuscout that made it, `gpuscout-KIND-PID-XXXX`, and removed
when its run ends; one that a killed gpuscout left behind is removed by the next gpuscout that
makes a folder, once that pid is no longer running.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_NAME = re.compile(r"^gpuscout-[a-z]+-(\d+)-")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def sweep_up() -> list[Path]:
    """Remove the folders of gpuscout processes that are gone (only this user's); the removed."""
    removed = []
    root = Path(tempfile.gettempdir())
    for entry in root.glob("gpuscout-*"):
        match = _NAME.match(entry.name)
        try:
            mine = entry.is_dir() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if match and mine and int(match.group(1)) != os.getpid() and not _running(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def make(kind: str) -> Path:
    """A new folder for this process's `kind` of work (after sweeping up what others left)."""
    sweep_up()
    return Path(tempfile.mkdtemp(prefix=f"gpuscout-{kind}-{os.getpid()}-"))


@contextlib.contextmanager
def folder(kind: str) -> Iterator[Path]:
    path = make(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
