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
  the same command if the store comes back, and named at the end.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import platformdirs
from pydantic import ValidationError

from gpuscout.errors import RunError
from gpuscout.record import STORED, StoredRecord
from gpuscout.record.document import json_document
from gpuscout.record.run import SCHEMA_VERSION
from gpuscout.store.failures import (FULL_BELOW_BYTES, StoreError, StoreFailure, explain, free_bytes,
                                     sqlite_errors, writable)

# "GPUS" in ASCII: marks the SQLite file as a gpuscout store (sqlite.org/pragma.html#pragma_application_id).
APPLICATION_ID = 0x47505553
BUSY_TIMEOUT_MS = 30_000
STORE_ENV = "GPUSCOUT_STORE"

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

# Added after schema 1 shipped, additively: `CREATE TABLE IF NOT EXISTS` on every open. Older
# gpuscout versions ignore a table they do not know, so this needs no schema version bump.
_TRIALS = """
CREATE TABLE IF NOT EXISTS trials (
    sweep TEXT NOT NULL,
    trial_key TEXT NOT NULL,
    trial_index INTEGER NOT NULL,
    sweep_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    params_json TEXT NOT NULL,
    result_json TEXT,
    updated_utc TEXT NOT NULL,
    PRIMARY KEY (sweep, trial_key)
)
"""

# Who runs which trial (sweep/leases.py): additive like `trials`.
_LEASES = """
CREATE TABLE IF NOT EXISTS trial_leases (
    sweep TEXT NOT NULL,
    trial_key TEXT NOT NULL,
    owner_json TEXT NOT NULL,
    heartbeat_unix REAL NOT NULL,
    PRIMARY KEY (sweep, trial_key)
)
"""

COLUMNS = ("id", "kind", "created_utc", "group_id", "workload", "backend", "precision", "xla",
            "batch_size", "data", "device", "gpu_name", "status", "throughput_median",
            "methodology_version")


# The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, section 1.3.1).
SQLITE_HEADER = b"SQLite format 3\x00"
def problem(exc: ValidationError) -> str:
    """The first thing wrong in a record, as `field.path: what`."""
    first = exc.errors()[0]
    loc = list(first["loc"])
    if loc and loc[0] in ("benchmark", "watch"):  # the record's kind, which the union put first
        loc = loc[1:]
    where = ".".join(str(p) for p in loc) or "record"
    got = "" if first["type"] == "missing" else f" (got {str(first.get('input'))[:60]!r})"
    return f"{where}: {first['msg']}{got}"


def parse_record(text: str) -> StoredRecord:
    """A stored record's JSON as its model (RunRecord or WatchRecord, by `kind`); ValidationError
    when it does not validate."""
    return STORED.validate_json(text)


def default_store_path() -> Path:
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir("gpuscout")) / "results.sqlite"


class Store:
    """`readonly`: for commands that only read (the file is opened read-only and never changed);
    otherwise the store is created when missing (`create`) and checked writable at once."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True, readonly: bool = False) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.readonly = readonly
        self.unreadable: dict[str, str] = {}  # id -> what is wrong, for records reads left out
        self.pending: list[StoredRecord] = []  # records `keep` could not store, saved in rescue_path
        self.rescue_path: Path | None = None
        self.rescue_reason: str | None = None
        exists = self.path.exists()
        if not exists and (readonly or not create):
            raise StoreError(f"no results store at {self.path}: run `gpuscout bench` first or pass --store")
        try:
            if not exists:
                self._create_new()
            self._refuse_foreign_file()
            if not readonly and not writable(self.path):
                # Caught here, not by SQLite: with a WAL file left beside the store, SQLite opens
                # it read-only without a word and fails only at the first write, after the work.
                raise StoreFailure(self.explain(OSError("the file or its folder cannot be written")))
            self._db = self._connect()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the results store {self.path}: {getattr(exc, 'strerror', None) or exc}; "
                             "pass another --store") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if readonly:
                self._check(self._db.execute("PRAGMA user_version").fetchone()[0],
                            self._db.execute("PRAGMA application_id").fetchone()[0])
            else:
                self._check_writable()
                self._refuse_full_disk()
                self._enable_wal()
                self._db.execute(_TRIALS)
                self._db.execute(_LEASES)
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreFailure(self.explain(exc)) from None

    def _create_new(self) -> None:
        """Make the store whole under a temporary name and link it into place, so that no one
        ever sees a store file half made (SQLite's own file is empty until its first commit, and
        an empty file is refused as not ours). Of two processes creating the same store, one
        links and the other uses its file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = self.path.with_name(f".{self.path.name}.new-{os.getpid()}")
        try:
            db = sqlite3.connect(fresh, isolation_level=None)
            try:
                for statement in filter(str.strip, SCHEMA_SQL.split(";")):
                    db.execute(statement)
                db.execute(_TRIALS)
                db.execute(_LEASES)
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("PRAGMA journal_mode = WAL")  # kept in the file's header
            finally:
                db.close()
            try:
                os.link(fresh, self.path)
            except FileExistsError:
                pass  # another gpuscout made it meanwhile: that one is used
            except OSError:  # a file system without hard links
                if not self.path.exists():
                    os.replace(fresh, self.path)
        finally:
            fresh.unlink(missing_ok=True)

    def _refuse_foreign_file(self) -> None:
        """A file gpuscout did not make is named and left as it is (SQLite would turn an empty
        file into a new database: the user's file, changed)."""
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder, not a results store: pass a file path with --store")
        try:
            with open(self.path, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StoreError(f"cannot read the results store {self.path} ({exc.strerror}): check its permissions "
                             "or pass another --store") from None
        if not header:
            raise StoreError(f"{self.path} is an empty file (0 bytes), not a gpuscout results store, and gpuscout "
                             "does not write into a file it did not make: remove it to start a store there, or "
                             "pass another --store")
        if header != SQLITE_HEADER:
            raise StoreError(f"{self.path} is not a usable gpuscout results store (not an SQLite file); "
                             "pass another --store or move this file away")

    def explain(self, exc: BaseException) -> str:
        """One line for an SQLite error on this store: what is wrong and what to do (store/failures.py)."""
        return explain(self.path, exc, BUSY_TIMEOUT_MS / 1000)

    def _refuse_full_disk(self) -> None:
        """A command that will store must not measure for minutes first and then find no room."""
        free = free_bytes(self.path)
        if free < FULL_BELOW_BYTES:
            raise StoreFailure(f"the disk holding {self.path} is full ({free // 1024} KiB free): free some space on "
                               "it, then run the command again (nothing was run)")

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

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.close()
        message = self.unsaved_message()
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
            self._check(self._db.execute("PRAGMA user_version").fetchone()[0],
                        self._db.execute("PRAGMA application_id").fetchone()[0])

    def _check(self, version: int, app_id: int) -> None:
        if app_id != APPLICATION_ID:
            raise StoreError(f"{self.path} is an SQLite file but not a gpuscout results store; "
                             "pass another --store")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer gpuscout (store schema {version}); this "
                f"gpuscout reads schema {SCHEMA_VERSION}: upgrade gpuscout (pip install -U gpuscout)")
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} holds store schema {version}; this gpuscout reads schema {SCHEMA_VERSION}: "
                f"run `gpuscout results migrate --store {self.path}` (it keeps a backup of the file)")

    def keep(self, records: list[StoredRecord]) -> bool:
        """Store `records` as a measuring command does: when SQLite cannot (a full disk, a damaged
        or locked file), they are saved with any saved before in a `results import` document
        beside the store (rescue_path) and False is returned; the command goes on, and the next
        `keep` that succeeds stores them too. close() then ends the command with exit 1 naming
        the file when some were never stored."""
        records = list(records)
        try:
            self.put_many(self.pending + records)
        except StoreFailure as exc:
            self.pending += records
            self.rescue_reason = str(exc)
            self._save_pending()
            return False
        if self.rescue_path is not None:
            self.rescue_path.unlink(missing_ok=True)
        self.pending, self.rescue_path, self.rescue_reason = [], None, None
        return True

    def _save_pending(self) -> None:
        """Beside the store; where that disk is full or read-only, in the working folder, then
        the temporary one. Written whole (a temporary name, then renamed) so it is never half a
        document."""
        if self.rescue_path is not None:
            places = [self.rescue_path]
        else:
            name = f"{self.path.name}.unsaved-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.json"
            places = [self.path.parent / name, Path.cwd() / name, Path(tempfile.gettempdir()) / name]
        text = json_document(self.pending)
        for place in places:
            partial = place.with_name(place.name + ".partial")
            try:
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, place)
                self.rescue_path = place
                return
            except OSError:
                try:
                    partial.unlink(missing_ok=True)
                except OSError:  # a read-only file system: nothing was written there either
                    pass
        # Nowhere to write: the records go to stderr, the one place left that keeps them
        sys.stderr.write(text + "\n")
        self.rescue_path = Path("<stderr>")

    def unsaved_message(self) -> str | None:
        if not self.pending:
            return None
        return (f"{len(self.pending)} record(s) could not be stored: {self.rescue_reason}; they are saved in "
                f"{self.rescue_path}: `gpuscout results import {self.rescue_path} --store {self.path}` stores them "
                "once the store works again")

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
                    raise StoreError(f"run {record.id} is already stored with different contents: "
                                     "nothing was imported")
                continue
            try:
                self._db.execute(
                    f"INSERT INTO runs ({', '.join(COLUMNS)}, record_json) VALUES "
                    f"({', '.join('?' * (len(COLUMNS) + 1))})", row)
            except OverflowError:  # a column SQLite keeps as a 64-bit integer
                big = [name for name, value in zip(COLUMNS, row) if isinstance(value, int) and abs(value) >= 2**63]
                raise StoreError(f"run {record.id}: {', '.join(big) or 'a number'} is larger than the store "
                                 "can hold (a 64-bit integer): nothing was stored") from None
            added += 1
        return added

    def _transaction(self):
        return _Transaction(self._db)

    @sqlite_errors
    def put_trial(self, sweep: str, key: str, index: int, sweep_hash: str, status: str, params: dict,
                  result: dict | None, updated_utc: str) -> None:
        """Insert or update one sweep trial (its own transaction: sweeps may share a store)."""
        with self._transaction():
            self._upsert_trial(sweep, key, index, sweep_hash, status, params, result, updated_utc)

    def _upsert_trial(self, sweep, key, index, sweep_hash, status, params, result, updated_utc) -> None:
        self._db.execute(
            "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(sweep, trial_key) DO UPDATE SET "
            "status = excluded.status, result_json = excluded.result_json, updated_utc = excluded.updated_utc, "
            "sweep_hash = excluded.sweep_hash",
            (sweep, key, index, sweep_hash, status, json.dumps(params, default=str),
             None if result is None else json.dumps(result, default=str), updated_utc))

    @sqlite_errors
    def claim_trial(self, sweep: str, key: str, index: int, sweep_hash: str, params: dict, owner: dict,
                    updated_utc: str, alive: Callable[[dict, float], bool], again: tuple[str, ...]) -> bool:
        """Take a trial to run it, in one transaction: False when another live driver holds it,
        or when it has ended meanwhile with a status not in `again`."""
        with self._transaction():
            row = self._db.execute("SELECT status FROM trials WHERE sweep = ? AND trial_key = ?",
                                   (sweep, key)).fetchone()
            lease = self._db.execute("SELECT owner_json, heartbeat_unix FROM trial_leases WHERE sweep = ? AND "
                                     "trial_key = ?", (sweep, key)).fetchone()
            if row is not None and row[0] != "running" and row[0] not in again:
                return False
            if lease is not None:
                holder = json.loads(lease[0])
                if holder.get("driver") != owner["driver"] and alive(holder, lease[1]):
                    return False
            self._upsert_trial(sweep, key, index, sweep_hash, "running", params, {"owner": owner}, updated_utc)
            self._db.execute("INSERT OR REPLACE INTO trial_leases VALUES (?, ?, ?, ?)",
                             (sweep, key, json.dumps(owner), time.time()))
            return True

    @sqlite_errors
    def renew_leases(self, sweep: str, keys: list[str], driver: str) -> None:
        with self._transaction():
            for key in keys:
                self._db.execute("UPDATE trial_leases SET heartbeat_unix = ? WHERE sweep = ? AND trial_key = ? "
                                 "AND json_extract(owner_json, '$.driver') = ?", (time.time(), sweep, key, driver))

    @sqlite_errors
    def lease_group(self, sweep: str, key: str, driver: str, group: dict) -> None:
        """The process group the trial runs in (sweep/leases.group), for a later driver to make
        sure it is gone."""
        with self._transaction():
            self._db.execute("UPDATE trial_leases SET owner_json = json_patch(owner_json, ?) WHERE sweep = ? "
                             "AND trial_key = ? AND json_extract(owner_json, '$.driver') = ?",
                             (json.dumps(group), sweep, key, driver))

    @sqlite_errors
    def leases(self, sweep: str) -> dict[str, tuple[dict, float]]:
        if self.readonly and not self._has_table("trial_leases"):
            return {}
        rows = self._db.execute("SELECT trial_key, owner_json, heartbeat_unix FROM trial_leases WHERE sweep = ?",
                                (sweep,))
        return {key: (json.loads(owner), heartbeat) for key, owner, heartbeat in rows}

    @sqlite_errors
    def finish_trial(self, sweep: str, key: str, index: int, sweep_hash: str, status: str, params: dict,
                     result: dict, updated_utc: str, records: list[StoredRecord] = ()) -> None:
        """A trial's result, its benchmark records and the end of its lease, all or nothing: a
        driver killed in between leaves the trial to run again, never stored twice."""
        with self._transaction():
            self._insert_runs(records)
            self._upsert_trial(sweep, key, index, sweep_hash, status, params, result, updated_utc)
            self._db.execute("DELETE FROM trial_leases WHERE sweep = ? AND trial_key = ?", (sweep, key))

    @sqlite_errors
    def trials(self, sweep: str) -> list[dict]:
        if self.readonly and not self._has_table("trials"):  # a store no sweep wrote, opened read-only
            return []
        rows = self._db.execute("SELECT trial_key, trial_index, sweep_hash, status, params_json, result_json "
                                "FROM trials WHERE sweep = ? ORDER BY trial_index", (sweep,))
        return [{"key": k, "index": i, "sweep_hash": h, "status": st, "params": json.loads(p),
                 "result": json.loads(r) if r else None} for k, i, h, st, p, r in rows]

    @sqlite_errors
    def get(self, run_id: str) -> StoredRecord:
        """A record by id or unique id prefix; StoreError names the problem otherwise."""
        rows = self._db.execute("SELECT id, record_json FROM runs WHERE id = ?", (run_id,)).fetchall()
        if not rows:
            rows = self._db.execute("SELECT id, record_json FROM runs WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                                    (_like_prefix(run_id),)).fetchall()
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}: `gpuscout results list` shows the ids")
        if len(rows) > 1:
            raise StoreError(f"run id prefix {run_id!r} is ambiguous: give more characters")
        found_id, text = rows[0]
        try:
            return parse_record(text)
        except ValidationError as exc:
            raise StoreError(f"run {found_id} in {self.path} is damaged ({problem(exc)}): it cannot be shown") from None

    @sqlite_errors
    def list(self, *, workload: str | None = None, status: str | None = None, limit: int | None = None,
             group: str | None = None, kind: str | None = None) -> list[StoredRecord]:
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

    def integrity(self) -> list[str]:
        """SQLite's own check of the file (PRAGMA integrity_check): ["ok"], or what is wrong (the
        first 50 problems)."""
        try:
            return [row[0] for row in self._db.execute("PRAGMA integrity_check(50)")]
        except sqlite3.DatabaseError as exc:  # too damaged for the check itself to run
            return [str(exc)]

    def readable_rows(self, table: str, columns: str) -> tuple[list[tuple], int]:
        """Every row of `table` that can still be read, and how many could not. Rows are read one
        rowid at a time, so a damaged page costs only the rows on it (a scan would stop there).
        Rowids of `runs` and `trials` are dense: rows are never deleted from them."""
        rows, lost = [], 0
        last = self._last_rowid(table)
        for rowid in range(1, last + 1):
            try:
                row = self._db.execute(f"SELECT {columns} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                lost += 1
                continue
            if row is not None:
                rows.append(row)
        return rows, lost

    def _last_rowid(self, table: str) -> int:
        if not self._has_table(table):
            return 0
        try:
            return self._db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
        except sqlite3.DatabaseError:
            # The b-tree's right edge is damaged: no row can have a rowid above what the file's
            # pages could hold (a row takes more than 16 bytes of a page)
            pages, size = (self._db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size"))
            return pages * size // 16

    def _has_table(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (name,)).fetchone() is not None

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


def row_of(record: StoredRecord) -> tuple:
    benchmark = record.kind == "benchmark"
    return (
        record.id, record.kind, record.created_utc, record.group_id, record.workload,
        record.backend.value if benchmark else None, record.precision.value if benchmark else None,
        int(record.xla) if benchmark else None, record.batch_size, record.data.value if benchmark else None,
        record.device, record.gpu.name if record.gpu else None, record.status,
        record.throughput.median if record.throughput else None, record.methodology_version,
        record.model_dump_json(),
    )
