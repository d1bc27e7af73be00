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
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable

import platformdirs
from pydantic import ValidationError

from gpuscout.errors import UsageError
from gpuscout.record import STORED, StoredRecord
from gpuscout.record.run import SCHEMA_VERSION

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


class StoreError(UsageError):
    """The store cannot be used as asked (exit 2; nothing is changed)."""


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
    def __init__(self, path: str | Path | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.unreadable: dict[str, str] = {}  # id -> what is wrong, for records reads left out
        if not self.path.exists() and not create:
            raise StoreError(f"no results store at {self.path}: run `gpuscout bench` first or pass --store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the results store {self.path}: {exc}") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._check_and_create()
            self._enable_wal()
            self._db.execute(_TRIALS)
            self._db.execute(_LEASES)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path} is not a usable gpuscout results store ({exc}); "
                             "pass another --store or move this file away") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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

    def _check_and_create(self) -> None:
        # BEGIN IMMEDIATE takes the write lock: this both proves the file is writable and
        # serialises two processes creating the same new store.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
            tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables == 0 and version == 0:
                for statement in filter(str.strip, SCHEMA_SQL.split(";")):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif app_id != APPLICATION_ID:
                raise StoreError(f"{self.path} is an SQLite file but not a gpuscout results store; "
                                 "pass another --store")
            elif version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer gpuscout (store schema {version}); this "
                    f"gpuscout reads schema {SCHEMA_VERSION}: upgrade gpuscout (pip install -U gpuscout)")
            elif version < SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} holds store schema {version}; this gpuscout reads schema {SCHEMA_VERSION}: "
                    f"run `gpuscout results migrate --store {self.path}` (it keeps a backup of the file)")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def put(self, record: StoredRecord) -> None:
        self.put_many([record])

    def put_many(self, records: list[StoredRecord]) -> int:
        """Insert records not already stored (by id), all or none: one transaction. Returns how
        many were new. A stored id whose record differs is an error (nothing is written)."""
        rows = [row_of(r) for r in records]
        try:
            self._db.execute("BEGIN IMMEDIATE")
            added = 0
            for record, row in zip(records, rows):
                existing = self._db.execute("SELECT record_json FROM runs WHERE id = ?", (record.id,)).fetchone()
                if existing is not None:
                    if json.loads(existing[0]) != json.loads(row[-1]):
                        raise StoreError(f"run {record.id} is already stored with different contents: "
                                         "nothing was imported")
                    continue
                self._db.execute(
                    f"INSERT INTO runs ({', '.join(COLUMNS)}, record_json) VALUES "
                    f"({', '.join('?' * (len(COLUMNS) + 1))})", row)
                added += 1
            self._db.execute("COMMIT")
            return added
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _transaction(self):
        return _Transaction(self._db)

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

    def renew_leases(self, sweep: str, keys: list[str], driver: str) -> None:
        with self._transaction():
            for key in keys:
                self._db.execute("UPDATE trial_leases SET heartbeat_unix = ? WHERE sweep = ? AND trial_key = ? "
                                 "AND json_extract(owner_json, '$.driver') = ?", (time.time(), sweep, key, driver))

    def lease_group(self, sweep: str, key: str, driver: str, group: dict) -> None:
        """The process group the trial runs in (sweep/leases.group), for a later driver to make
        sure it is gone."""
        with self._transaction():
            self._db.execute("UPDATE trial_leases SET owner_json = json_patch(owner_json, ?) WHERE sweep = ? "
                             "AND trial_key = ? AND json_extract(owner_json, '$.driver') = ?",
                             (json.dumps(group), sweep, key, driver))

    def leases(self, sweep: str) -> dict[str, tuple[dict, float]]:
        rows = self._db.execute("SELECT trial_key, owner_json, heartbeat_unix FROM trial_leases WHERE sweep = ?",
                                (sweep,))
        return {key: (json.loads(owner), heartbeat) for key, owner, heartbeat in rows}

    def finish_trial(self, sweep: str, key: str, index: int, sweep_hash: str, status: str, params: dict,
                     result: dict, updated_utc: str, records: list[StoredRecord] = ()) -> None:
        """A trial's result, its benchmark records and the end of its lease, all or nothing: a
        driver killed in between leaves the trial to run again, never stored twice."""
        with self._transaction():
            for record in records:
                if self._db.execute("SELECT 1 FROM runs WHERE id = ?", (record.id,)).fetchone() is None:
                    self._db.execute(f"INSERT INTO runs ({', '.join(COLUMNS)}, record_json) VALUES "
                                     f"({', '.join('?' * (len(COLUMNS) + 1))})", row_of(record))
            self._upsert_trial(sweep, key, index, sweep_hash, status, params, result, updated_utc)
            self._db.execute("DELETE FROM trial_leases WHERE sweep = ? AND trial_key = ?", (sweep, key))

    def trials(self, sweep: str) -> list[dict]:
        rows = self._db.execute("SELECT trial_key, trial_index, sweep_hash, status, params_json, result_json "
                                "FROM trials WHERE sweep = ? ORDER BY trial_index", (sweep,))
        return [{"key": k, "index": i, "sweep_hash": h, "status": st, "params": json.loads(p),
                 "result": json.loads(r) if r else None} for k, i, h, st, p, r in rows]

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
