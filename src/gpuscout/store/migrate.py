"""`gpuscout results migrate`: bring a store written by an older gpuscout to this schema.

All or nothing: every record is upgraded (record/migrate.py) and validated before anything is
written; one that cannot be is named and the file is left as it was. Then, holding the write
lock, the file is copied byte for byte beside the store (after a checkpoint, so that a store in
WAL mode is whole in its main file) and the runs table is rebuilt in the same transaction: a
crash midway leaves the old table and schema version, and the copy is the store as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpuscout.record.migrate import MigrationError, upgrade
from gpuscout.record.run import SCHEMA_VERSION, RunRecord
from gpuscout.store.failures import StoreError
from gpuscout.store.rows import COLUMNS, problem, row_of
from gpuscout.store.schema import APPLICATION_ID, SCHEMA_SQL
from gpuscout.store.sqlite import BUSY_TIMEOUT_MS


@dataclass
class Migrated:
    path: Path
    from_version: int
    records: int
    backup: Path | None  # None when there was nothing to do


def migrate(path: Path) -> Migrated:
    if not path.is_file():
        raise StoreError(f"no results store at {path}: pass the store to migrate with --store")
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        try:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} is not a usable gpuscout results store ({exc})") from None
        if app_id != APPLICATION_ID:
            raise StoreError(f"{path} is not a gpuscout results store: nothing to migrate")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} holds store schema {version}, newer than this gpuscout's ({SCHEMA_VERSION}): "
                "upgrade gpuscout (pip install -U gpuscout); nothing was changed"
            )
        if version == SCHEMA_VERSION:
            return Migrated(path, version, 0, None)
        records = _upgraded(db, path, version)
        backup = _backup_and_rewrite(db, path, version, records)
        return Migrated(path, version, len(records), backup)
    finally:
        db.close()


def _upgraded(db: sqlite3.Connection, path: Path, version: int) -> list[RunRecord]:
    records = []
    for run_id, text in db.execute("SELECT id, record_json FROM runs ORDER BY created_utc, id"):
        try:
            records.append(RunRecord.model_validate(upgrade(json.loads(text), version)))
        except (ValueError, MigrationError) as exc:
            why = problem(exc) if isinstance(exc, ValidationError) else str(exc)
            raise StoreError(
                f"run {run_id} in {path} cannot be brought to schema {SCHEMA_VERSION} ({why}): nothing was changed"
            ) from None
    return records


def _backup_and_rewrite(db: sqlite3.Connection, path: Path, version: int, records: list[RunRecord]) -> Path:
    busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:
        raise StoreError(f"another process is using {path}: migrate it when nothing else has it open")
    db.execute("BEGIN IMMEDIATE")
    backup = None
    try:
        backup = _backup(path, version)
        db.execute("ALTER TABLE runs RENAME TO runs_old")
        for index in ("runs_by_workload", "runs_by_group"):
            db.execute(f"DROP INDEX IF EXISTS {index}")
        for statement in filter(str.strip, SCHEMA_SQL.split(";")):
            db.execute(statement)
        db.executemany(
            f"INSERT INTO runs ({', '.join(COLUMNS)}, record_json) VALUES ({', '.join('?' * (len(COLUMNS) + 1))})",
            [row_of(r) for r in records],
        )
        db.execute("DROP TABLE runs_old")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        if backup is not None:
            backup.unlink(missing_ok=True)
        raise
    return backup


def _backup(path: Path, version: int) -> Path:
    """A copy of the store under the first free name STORE.schemaV-backup[N], made exclusively
    (never over a file, never through a link: core/outputs/'s rule for a file that must be new)."""
    n = 1
    while True:
        backup = path.with_name(f"{path.name}.schema{version}-backup{n if n > 1 else ''}")
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            n += 1
            continue
        with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out)
        return backup
