"""SQLite results store.

- One row per run: indexed columns for filtering plus the whole record as JSON (the record is
  the contract; columns are for queries), in the spirit of asv's and pytest-benchmark's stores.
  Records go in and come out through the typed model (gpuscout.record): one that does not
  validate is never written, and one that does not validate when read (a damaged file, a hand
  edit) is left out of the answer and named in `unreadable`, never a crash.
- WAL journal and a busy timeout: several processes can write at once (a sweep, two shells).
- The schema version lives in ``PRAGMA user_version`` and the file is marked as ours with
  ``PRAGMA application_id``. A file from a newer gpuscout is refused, naming both versions; a
  file from an older one is refused with the command that migrates it (store/migrate.py; only
  that command changes it); a file that is not a gpuscout store is refused; nothing is changed
  in any of these cases.
- Every write is one transaction: a record is stored whole or not at all.
- It fails safe. Every SQLite error becomes a StoreFailure whose one line names the file, what
  is wrong (damaged, disk full, read-only, locked) and what to do; a file gpuscout did not make
  (empty, unreadable, not SQLite) is never written to. Commands that only read open the file
  read-only, so a store on a read-only file system can still be listed, compared and reported.
  The errors and their one-line explanations are store/failures.py. Records that cannot be
  stored (`keep`) are saved as a `results import` document beside the store, stored later by
  the same command if the store comes back, and named at the end (store/rescue.py).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

import platformdirs
from pydantic import ValidationError

from gpuscout.core.errors import RunError
from gpuscout.record import StoredRecord
from gpuscout.store import schema
from gpuscout.store.failures import (
    FULL_BELOW_BYTES,
    StoreError,
    StoreFailure,
    explain,
    free_bytes,
    sqlite_errors,
    writable,
)
from gpuscout.store.rescue import Rescue
from gpuscout.store.rows import COLUMNS, parse_record, problem, row_of
from gpuscout.store.tracked import TRACKED_SQL, TrackedTable
from gpuscout.store.trials import LEASES_SQL, TRIALS_SQL, TrialTable

BUSY_TIMEOUT_MS = 30_000
# What a record's id may be (record/run.py and record/watch.py say the same): checked before a query
RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
STORE_ENV = "GPUSCOUT_STORE"


def default_store_path() -> Path:
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir("gpuscout")) / "results.sqlite"


class Store(TrialTable, TrackedTable):
    """`readonly`: for commands that only read (the file is opened read-only and never changed);
    otherwise the store is created when missing (`create`) and checked writable at once."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True, readonly: bool = False) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.readonly = readonly
        self.unreadable: dict[str, str] = {}  # id -> what is wrong, for records reads left out
        self.rescue = Rescue(self.path)  # the records `keep` could not store, saved beside the store
        try:
            os.stat(self.path)
            exists = True
        except (FileNotFoundError, NotADirectoryError):
            exists = False
        except OSError as exc:  # a name past the file system's limits: the path itself says so
            raise StoreError(
                f"cannot open the results store {str(self.path)[:80]}…: {exc.strerror}; pass another --store"
            ) from None
        if not exists and (readonly or not create):
            raise StoreError(f"no results store at {self.path}: run `gpuscout bench` first or pass --store")
        try:
            if not exists:
                schema.create(self.path)
            schema.refuse_foreign_file(self.path)
            if not readonly and not writable(self.path):
                # Caught here, not by SQLite: with a WAL file left beside the store, SQLite opens
                # it read-only without a word and fails only at the first write, after the work.
                raise StoreFailure(self.explain(OSError("the file or its folder cannot be written")))
            self._db = self._connect()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the results store {self.path}: {getattr(exc, 'strerror', None) or exc}; "
                "pass another --store"
            ) from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if readonly:
                schema.check(
                    self.path,
                    self._db.execute("PRAGMA user_version").fetchone()[0],
                    self._db.execute("PRAGMA application_id").fetchone()[0],
                )
            else:
                self._check_writable()
                self._refuse_full_disk()
                self._enable_wal()
                self._db.execute(TRIALS_SQL)
                self._db.execute(LEASES_SQL)
                self._db.execute(TRACKED_SQL)
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreFailure(self.explain(exc)) from None

    def explain(self, exc: BaseException) -> str:
        """One line for an SQLite error on this store: what is wrong and what to do (store/failures.py)."""
        return explain(self.path, exc, BUSY_TIMEOUT_MS / 1000)

    def _refuse_full_disk(self) -> None:
        """A command that will store must not measure for minutes first and then find no room."""
        free = free_bytes(self.path)
        if free < FULL_BELOW_BYTES:
            raise StoreFailure(
                f"the disk holding {self.path} is full ({free // 1024} KiB free): free some space on "
                "it, then run the command again (nothing was run)"
            )

    def _connect(self) -> sqlite3.Connection:
        def connect(target, **kw) -> sqlite3.Connection:
            return sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, **kw)

        if not self.readonly or (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)):
            # A reader that could write opens the file as writers do, so that closing it tidies
            # up the WAL files; it never writes a row.
            return connect(self.path)
        uri = self.path.resolve().as_uri()
        db = connect(f"{uri}?mode=ro", uri=True)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # A WAL store on a read-only file system: SQLite cannot make the shared-memory file a
            # reader needs; read the file as it is (nothing can be writing to it there).
            db.close()
            return connect(f"{uri}?immutable=1", uri=True)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.close()
        message = self.rescue.message()
        if message and kind is None:
            raise RunError(message)
        if message:  # another error ends the command: the saved records must still be named
            sys.stderr.write(f"warning: {message}\n")

    def _enable_wal(self) -> None:
        # Switching a store to WAL needs every other connection off the file for a moment, and
        # SQLite answers SQLITE_BUSY at once instead of calling the busy handler here (seen when
        # several processes open a new store together: a sweep's first trials). WAL persists in
        # the file, so only the first opener switches; the others retry until it has. A file
        # system without shared memory answers with the old mode and no error: the rollback
        # journal it keeps is still safe, only readers then wait for writers.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)

    def _check_writable(self) -> None:
        # BEGIN IMMEDIATE takes the write lock: it proves the file is writable before any work.
        with self._transaction():
            schema.check(
                self.path,
                self._db.execute("PRAGMA user_version").fetchone()[0],
                self._db.execute("PRAGMA application_id").fetchone()[0],
            )

    def keep(self, records: list[StoredRecord]) -> bool:
        """Store `records` as a measuring command does: when SQLite cannot (a full disk, a damaged
        or locked file), they are saved with any saved before (store/rescue.py) and False is
        returned; the command goes on, and the next `keep` that succeeds stores them too. Leaving
        the `with` block then ends the command with exit 1 naming the file when some were never
        stored."""
        records = list(records)
        try:
            self.put_many(self.rescue.records + records)
        except StoreFailure as exc:
            self.rescue.add(records, str(exc))
            return False
        self.rescue.stored()
        return True

    def put(self, record: StoredRecord) -> None:
        self.put_many([record])

    @sqlite_errors
    def put_many(self, records: list[StoredRecord]) -> int:
        """Insert records not already stored (by id), all or none: one transaction. Returns how
        many were new. A stored id whose record differs is an error (nothing is written)."""
        with self._transaction():
            return self._insert_runs(records)

    def _insert_runs(self, records: list[StoredRecord]) -> int:
        """Inside a transaction: the records not stored yet; how many were new."""
        added = 0
        for record in records:
            row = row_of(record)
            existing = self._db.execute("SELECT record_json FROM runs WHERE id = ?", (record.id,)).fetchone()
            if existing is not None:
                if json.loads(existing[0]) != json.loads(row[-1]):
                    raise StoreError(f"run {record.id} is already stored with different contents: nothing was imported")
                continue
            try:
                self._db.execute(
                    f"INSERT INTO runs ({', '.join(COLUMNS)}, record_json) VALUES "
                    f"({', '.join('?' * (len(COLUMNS) + 1))})",
                    row,
                )
            except OverflowError:  # a column SQLite keeps as a 64-bit integer
                big = [name for name, value in zip(COLUMNS, row) if isinstance(value, int) and abs(value) >= 2**63]
                raise StoreError(
                    f"run {record.id}: {', '.join(big) or 'a number'} is larger than the store "
                    "can hold (a 64-bit integer): nothing was stored"
                ) from None
            added += 1
        return added

    def _transaction(self):
        return _Transaction(self._db)

    @sqlite_errors
    def get(self, run_id: str) -> StoredRecord:
        """A record by id or unique id prefix; StoreError names the problem otherwise."""
        if not RUN_ID.match(run_id):
            shown = run_id if len(run_id) <= 40 else run_id[:40] + "…"
            raise StoreError(
                f"{shown!r} is not a run id: ids are up to 64 letters, digits, '.', '_' or '-' "
                "(`gpuscout results list` shows them)"
            )
        rows = self._db.execute("SELECT id, record_json FROM runs WHERE id = ?", (run_id,)).fetchall()
        if not rows:
            rows = self._db.execute(
                "SELECT id, record_json FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_utc DESC LIMIT 6",
                (_like_prefix(run_id),),
            ).fetchall()
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}: `gpuscout results list` shows the ids")
        if len(rows) > 1:
            listed = ", ".join(row[0] for row in rows[:5]) + (", …" if len(rows) > 5 else "")
            raise StoreError(f"run id prefix {run_id!r} is ambiguous ({listed}): give more characters")
        found_id, text = rows[0]
        try:
            return parse_record(text)
        except ValidationError as exc:
            raise StoreError(f"run {found_id} in {self.path} is damaged ({problem(exc)}): it cannot be shown") from None

    @sqlite_errors
    def list(
        self,
        *,
        workload: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        group: str | None = None,
        kind: str | None = None,
    ) -> list[StoredRecord]:
        """Records (of one `kind`: benchmark, watch), newest first; those that do not validate
        are left out and named in `unreadable`."""
        query, params = "SELECT id, record_json FROM runs", []
        where = []
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if group:
            where.append("group_id = ?")
            params.append(group)
        if workload:
            where.append("workload = ?")
            params.append(workload)
        if status:
            where.append("status = ?")
            params.append(status)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_utc DESC, id"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        records = []
        for run_id, text in self._db.execute(query, params):
            try:
                records.append(parse_record(text))
            except ValidationError as exc:
                self.unreadable[run_id] = problem(exc)
        return records

    def _has_table(self, name: str) -> bool:
        return (
            self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
            is not None
        )

    @sqlite_errors
    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM runs").fetchone()[0]


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when anything goes wrong in between."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:
            self.db.execute("ROLLBACK")


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
