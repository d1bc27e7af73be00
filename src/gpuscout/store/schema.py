"""The store file itself: its tables, the marks that make it gpuscout's (application id, schema
version), making a new one whole, and refusing a file gpuscout did not make or cannot read
(store/sqlite.py opens it through these).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from gpuscout.core.outputs import SQLITE_HEADER
from gpuscout.record.run import SCHEMA_VERSION
from gpuscout.store.failures import StoreError
from gpuscout.store.tracked import TRACKED_SQL
from gpuscout.store.trials import LEASES_SQL, TRIALS_SQL

# "GPUS" in ASCII: marks the SQLite file as a gpuscout store (sqlite.org/pragma.html#pragma_application_id).
APPLICATION_ID = 0x47505553
# Schema 2 adds `kind` (records of other kinds share the store) and lets the run configuration
# columns be NULL for kinds that have none.
SCHEMA_SQL = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    group_id TEXT NOT NULL,
    workload TEXT NOT NULL,
    backend TEXT,
    precision TEXT,
    xla INTEGER,
    batch_size INTEGER,
    data TEXT,
    device TEXT NOT NULL,
    gpu_name TEXT,
    status TEXT NOT NULL,
    throughput_median REAL,
    methodology_version INTEGER NOT NULL,
    record_json TEXT NOT NULL
);
CREATE INDEX runs_by_workload ON runs (workload, created_utc);
CREATE INDEX runs_by_group ON runs (group_id);
"""


def create(path: Path) -> None:
    """Make the store whole under a temporary name and link it into place, so that no one
    ever sees a store file half made (SQLite's own file is empty until its first commit, and
    an empty file is refused as not ours). Of two processes creating the same store, one
    links and the other uses its file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name[:200]}.new-{os.getpid()}")  # a name that fits, however long the store's
    fresh.unlink(missing_ok=True)  # a stale one (a pid reused), or a link in its place: removed, never followed
    try:
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        db = sqlite3.connect(fresh, isolation_level=None)
        try:
            for statement in filter(str.strip, SCHEMA_SQL.split(";")):
                db.execute(statement)
            db.execute(TRIALS_SQL)
            db.execute(LEASES_SQL)
            db.execute(TRACKED_SQL)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("PRAGMA journal_mode = WAL")  # kept in the file's header
        finally:
            db.close()
        try:
            os.link(fresh, path)
        except FileExistsError:
            pass  # another gpuscout made it meanwhile: that one is used
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)


def refuse_foreign_file(path: Path) -> None:
    """A file gpuscout did not make is named and left as it is (SQLite would turn an empty
    file into a new database: the user's file, changed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise StoreError(f"cannot look at the results store {path} ({exc.strerror}): pass another --store") from None
    if stat.S_ISDIR(mode):
        raise StoreError(f"{path} is a folder, not a results store: pass a file path with --store")
    if not stat.S_ISREG(mode):  # a FIFO would block the first read forever; a device is no store
        kind = (
            "FIFO" if stat.S_ISFIFO(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"
        )
        raise StoreError(f"{path} is a {kind}, not a results store (a regular file): pass a file path with --store")
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(
            f"cannot read the results store {path} ({exc.strerror}): check its permissions or pass another --store"
        ) from None
    if not header:
        raise StoreError(
            f"{path} is an empty file (0 bytes), not a gpuscout results store, and gpuscout "
            "does not write into a file it did not make: remove it to start a store there, or "
            "pass another --store"
        )
    if header != SQLITE_HEADER:
        raise StoreError(
            f"{path} is not a usable gpuscout results store (not an SQLite file); "
            "pass another --store or move this file away"
        )


def check(path: Path, version: int, app_id: int) -> None:
    if app_id != APPLICATION_ID:
        raise StoreError(f"{path} is an SQLite file but not a gpuscout results store; pass another --store")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer gpuscout (store schema {version}); this "
            f"gpuscout reads schema {SCHEMA_VERSION}: upgrade gpuscout (pip install -U gpuscout)"
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"{path} holds store schema {version}; this gpuscout reads schema {SCHEMA_VERSION}: "
            f"run `gpuscout results migrate --store {path}` (it keeps a backup of the file)"
        )
