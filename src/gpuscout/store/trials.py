"""Sweep trials in the store: the `trials` table (one row per trial: its status, parameters and
result) and `trial_leases` (which driver runs which trial, sweep/leases.py). Both are additive
tables beside `runs`, created with IF NOT EXISTS on every open (store/sqlite.py).

`TrialTable` is the part of `Store` that reads and writes them, over the store's own connection
and transactions: a trial's result, its benchmark records and the end of its lease commit as
one (`finish_trial`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from pydantic import ValidationError

from gpuscout.record import StoredRecord
from gpuscout.record.trial import StoredTrial, TrialOutcome
from gpuscout.store.failures import sqlite_errors

# Added after schema 1 shipped, additively: `CREATE TABLE IF NOT EXISTS` on every open. Older
# gpuscout versions ignore a table they do not know, so this needs no schema version bump.
TRIALS_SQL = """
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
LEASES_SQL = """
CREATE TABLE IF NOT EXISTS trial_leases (
    sweep TEXT NOT NULL,
    trial_key TEXT NOT NULL,
    owner_json TEXT NOT NULL,
    heartbeat_unix REAL NOT NULL,
    PRIMARY KEY (sweep, trial_key)
)
"""


class TrialTable:
    """Store's sweep-trial methods; the store gives the connection (`_db`), its transactions
    (`_transaction`), `_insert_runs`, `_has_table` and `readonly`."""

    @sqlite_errors
    def put_trial(
        self,
        sweep: str,
        key: str,
        index: int,
        sweep_hash: str,
        status: str,
        params: dict,
        result: dict | None,
        updated_utc: str,
    ) -> None:
        """Insert or update one sweep trial as it stands (its own transaction: sweeps may share a
        store); salvage copies rows with it, whatever their result holds."""
        with self._transaction():
            self._upsert_trial(sweep, key, index, sweep_hash, status, params, result, updated_utc)

    def _upsert_trial(self, sweep, key, index, sweep_hash, status, params, result, updated_utc) -> None:
        self._db.execute(
            "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(sweep, trial_key) DO UPDATE SET "
            "status = excluded.status, result_json = excluded.result_json, updated_utc = excluded.updated_utc, "
            "sweep_hash = excluded.sweep_hash",
            (
                sweep,
                key,
                index,
                sweep_hash,
                status,
                json.dumps(params, default=str),
                None if result is None else json.dumps(result, default=str),
                updated_utc,
            ),
        )

    @sqlite_errors
    def claim_trial(
        self,
        sweep: str,
        key: str,
        index: int,
        sweep_hash: str,
        params: dict,
        owner: dict,
        updated_utc: str,
        alive: Callable[[dict, float], bool],
        again: tuple[str, ...],
    ) -> bool:
        """Take a trial to run it, in one transaction: False when another live driver holds it,
        or when it has ended meanwhile with a status not in `again`."""
        with self._transaction():
            row = self._db.execute(
                "SELECT status FROM trials WHERE sweep = ? AND trial_key = ?", (sweep, key)
            ).fetchone()
            lease = self._db.execute(
                "SELECT owner_json, heartbeat_unix FROM trial_leases WHERE sweep = ? AND trial_key = ?", (sweep, key)
            ).fetchone()
            if row is not None and row[0] != "running" and row[0] not in again:
                return False
            if lease is not None:
                holder = json.loads(lease[0])
                if holder.get("driver") != owner["driver"] and alive(holder, lease[1]):
                    return False
            self._upsert_trial(sweep, key, index, sweep_hash, "running", params, {"owner": owner}, updated_utc)
            self._db.execute(
                "INSERT OR REPLACE INTO trial_leases VALUES (?, ?, ?, ?)", (sweep, key, json.dumps(owner), time.time())
            )
            return True

    @sqlite_errors
    def renew_leases(self, sweep: str, keys: list[str], driver: str) -> None:
        with self._transaction():
            for key in keys:
                self._db.execute(
                    "UPDATE trial_leases SET heartbeat_unix = ? WHERE sweep = ? AND trial_key = ? "
                    "AND json_extract(owner_json, '$.driver') = ?",
                    (time.time(), sweep, key, driver),
                )

    @sqlite_errors
    def lease_group(self, sweep: str, key: str, driver: str, group: dict) -> None:
        """The process group the trial runs in (sweep/leases.group), for a later driver to make
        sure it is gone."""
        with self._transaction():
            self._db.execute(
                "UPDATE trial_leases SET owner_json = json_patch(owner_json, ?) WHERE sweep = ? "
                "AND trial_key = ? AND json_extract(owner_json, '$.driver') = ?",
                (json.dumps(group), sweep, key, driver),
            )

    @sqlite_errors
    def leases(self, sweep: str) -> dict[str, tuple[dict, float]]:
        if self.readonly and not self._has_table("trial_leases"):
            return {}
        rows = self._db.execute(
            "SELECT trial_key, owner_json, heartbeat_unix FROM trial_leases WHERE sweep = ?", (sweep,)
        )
        return {key: (json.loads(owner), heartbeat) for key, owner, heartbeat in rows}

    @sqlite_errors
    def finish_trial(
        self,
        sweep: str,
        key: str,
        index: int,
        sweep_hash: str,
        status: str,
        params: dict,
        result: TrialOutcome,
        updated_utc: str,
        records: list[StoredRecord] = (),
    ) -> None:
        """A trial's result, its benchmark records and the end of its lease, all or nothing: a
        driver killed in between leaves the trial to run again, never stored twice."""
        # python mode, not pydantic's JSON: a NaN the trial reported stays NaN (json writes it so)
        row = result.model_dump()
        with self._transaction():
            self._insert_runs(records)
            self._upsert_trial(sweep, key, index, sweep_hash, status, params, row, updated_utc)
            self._db.execute("DELETE FROM trial_leases WHERE sweep = ? AND trial_key = ?", (sweep, key))

    @sqlite_errors
    def sweeps(self) -> list[str]:
        """The names of the sweeps with trials in the store."""
        if self.readonly and not self._has_table("trials"):
            return []
        return [name for (name,) in self._db.execute("SELECT DISTINCT sweep FROM trials ORDER BY sweep")]

    @sqlite_errors
    def trials(self, sweep: str) -> list[StoredTrial]:
        if self.readonly and not self._has_table("trials"):  # a store no sweep wrote, opened read-only
            return []
        rows = self._db.execute(
            "SELECT trial_key, trial_index, sweep_hash, status, params_json, result_json "
            "FROM trials WHERE sweep = ? ORDER BY trial_index",
            (sweep,),
        )
        return [_trial(*row) for row in rows]


def _trial(key: str, index: int, sweep_hash: str, status: str, params: str, result: str | None) -> StoredTrial:
    """A row as its type: its result the trial's outcome, or while it runs, its driver's lease."""
    held = json.loads(result) if result else None
    owner = held.get("owner") if isinstance(held, dict) and set(held) == {"owner"} else None
    outcome = None
    if isinstance(held, dict) and owner is None:
        try:
            outcome = TrialOutcome.model_validate(held)
        except ValidationError:  # not an outcome this version can read: the trial is listed without it
            pass
    return StoredTrial(
        key=key,
        index=index,
        sweep_hash=sweep_hash,
        status=status,
        params=json.loads(params),
        result=outcome,
        owner=owner,
    )
