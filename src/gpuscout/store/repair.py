"""A damaged store: what is wrong with it (`results check`) and a new store holding everything that
can still be read out of it (`results salvage`). The damaged file is only ever read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from gpuscout.record import StoredRecord
from gpuscout.store.failures import StoreError, StoreFailure
from gpuscout.store.sqlite import Store, parse_record, problem


@dataclass
class Contents:
    """What could be read out of a store: valid records and trials, and what could not."""

    records: list[StoredRecord] = field(default_factory=list)
    trials: list[dict] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)  # record or trial -> what is wrong with it
    lost_rows: int = 0  # rows on damaged pages: not even their id can be read


@dataclass
class CheckReport:
    path: str
    integrity: list[str]  # SQLite's integrity check: ["ok"] or its problems
    records: int
    trials: int
    invalid: dict[str, str]
    lost_rows: int

    @property
    def ok(self) -> bool:
        return self.integrity == ["ok"] and not self.invalid and not self.lost_rows


def read_contents(store: Store) -> Contents:
    out = Contents()
    rows, lost = store.readable_rows("runs", "id, record_json")
    out.lost_rows += lost
    for run_id, text in rows:
        try:
            out.records.append(parse_record(text))
        except ValidationError as exc:
            out.invalid[f"run {run_id}"] = problem(exc)
    rows, lost = store.readable_rows("trials", "sweep, trial_key, trial_index, sweep_hash, status, params_json, "
                                               "result_json, updated_utc")
    out.lost_rows += lost
    for sweep, key, index, sweep_hash, status, params, result, updated in rows:
        try:
            out.trials.append({"sweep": sweep, "key": key, "index": int(index), "sweep_hash": sweep_hash,
                               "status": status, "params": json.loads(params),
                               "result": json.loads(result) if result else None, "updated_utc": updated})
        except (TypeError, ValueError) as exc:
            out.invalid[f"trial {sweep}/{key}"] = f"not readable JSON ({exc})"
    return out


def check(path: Path | None) -> CheckReport:
    """SQLite's integrity check, then every record and trial read and validated. A file too
    damaged to open as a store is reported as such (StoreFailure), not raised."""
    try:
        store = Store(path, readonly=True)
    except StoreFailure as exc:
        return CheckReport(str(path), [str(exc)], 0, 0, {}, 0)
    with store:
        integrity = store.integrity()
        contents = read_contents(store)
        return CheckReport(str(store.path), integrity, len(contents.records), len(contents.trials),
                           contents.invalid, contents.lost_rows)


@dataclass
class SalvageReport:
    source: str
    out: str
    records: int
    trials: int
    invalid: dict[str, str]
    lost_rows: int


def salvage(path: Path | None, out: Path) -> SalvageReport:
    """Copy every readable, valid record and trial of the store at `path` into a new store at
    `out` (which must not exist: nothing is ever overwritten)."""
    if out.exists():
        raise StoreError(f"{out} exists: --out names the new store salvage writes, a file that does not exist yet")
    with Store(path, readonly=True) as damaged:
        contents = read_contents(damaged)
        source = str(damaged.path)
    with Store(out) as fresh:
        fresh.put_many(contents.records)
        for t in contents.trials:
            fresh.put_trial(t["sweep"], t["key"], t["index"], t["sweep_hash"], t["status"], t["params"], t["result"],
                            t["updated_utc"])
    return SalvageReport(source, str(out), len(contents.records), len(contents.trials), contents.invalid,
                         contents.lost_rows)
