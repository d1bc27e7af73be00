"""What a store that fails says: the errors, and one line for each way SQLite can fail (damaged,
disk full, read-only, locked) naming the file and what to do (store/sqlite.py raises them)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
from pathlib import Path

from gpuscout.core.errors import UsageError

# Below this much free space, an I/O error writing the store is taken for a full disk.
FULL_BELOW_BYTES = 1 << 20


class StoreError(UsageError):
    """The store cannot be used as asked (exit 2; nothing is changed)."""


class StoreFailure(StoreError):
    """SQLite could not do what was asked: the file is damaged, its disk is full or read-only, or
    another process kept it locked. The message says which, and what to do."""


def explain(path: Path, exc: BaseException, busy_timeout_s: float) -> str:
    """One line for an SQLite error on the store at `path`: what is wrong and what to do
    (`busy_timeout_s`: how long a lock was waited for)."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    if "malformed" in low or "not a database" in low or "corrupt" in low or isinstance(exc, ValueError):
        return (
            f"{path} is damaged ({text}): `gpuscout results check --store {path}` says what is wrong, and "
            f"`gpuscout results salvage --store {path} --out NEW.sqlite` copies every readable record into a "
            "new store"
        )
    if "full" in low or ("i/o" in low and free_bytes(path) < FULL_BELOW_BYTES):
        return f"the disk holding {path} is full ({text}): free some space on it, then run the command again"
    if "readonly" in low or "read-only" in low or not writable(path):
        return (
            f"{path} is read-only ({text}): commands that only read it (results list, show, export, check; "
            "compare; report) still work; to store runs, pass a writable --store"
        )
    if "locked" in low or "busy" in low:
        return (
            f"{path} stayed locked by another process for {busy_timeout_s:g} s ({text}): let it "
            "finish (a sweep, another gpuscout), then run the command again"
        )
    return (
        f"{path} cannot be read or written ({text}): check that its disk is mounted, writable and not full; "
        f"`gpuscout results check --store {path}` says whether the file is damaged"
    )


def writable(path: Path) -> bool:
    """Whether the store and its folder (where SQLite keeps its journal) can be written: false on
    a read-only file system even for root."""
    return os.access(path.parent, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return FULL_BELOW_BYTES


def sqlite_errors(method):
    """A store method whose SQLite errors (and damaged JSON in a row) become StoreFailure."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, json.JSONDecodeError) as exc:
            raise StoreFailure(self.explain(exc)) from None

    return wrapper
