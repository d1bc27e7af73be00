"""A damaged store: what is wrong with it (`results check`) and a new store holding everything that
can still be read out of it (`results salvage`). The damaged file is only ever read.

Rows are read two ways, as SQLite's own recovery reads them (sqlite.org/recovery.html):
- through SQLite, one rowid at a time, so that a damaged page costs only the rows on it (a scan
  stops at the first). The file is opened read-only with `writable_schema` on: without it SQLite
  refuses a file shorter than its header says (its end cut off) before reading a single row;
- then page by page (store/pages.py), which finds the rows on leaf pages that SQLite cannot reach
  any more (a damaged interior page, a damaged schema).
Rowids of `runs` and `trials` are dense (rows are never deleted from them), so a gap in the
rowids found is a row lost, and is counted as one.
"""

from __future__ import annotations

import json
import mmap
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from gpuscout.record import StoredRecord
from gpuscout.store import pages, schema
from gpuscout.store.failures import StoreError
from gpuscout.store.rows import parse_record, problem
from gpuscout.store.sqlite import Store, default_store_path

RUN_COLUMNS = 16  # store/schema.py's `runs`: id first, record_json last
TRIAL_COLUMNS = 8  # store/trials.py's `trials`
TRIAL_FIELDS = (
    "sweep",
    "trial_key",
    "trial_index",
    "sweep_hash",
    "status",
    "params_json",
    "result_json",
    "updated_utc",
)


@dataclass
class Contents:
    """What could be read out of a store: valid records and trials, and what could not."""

    records: list[StoredRecord] = field(default_factory=list)
    trials: list[dict] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)  # record or trial -> what is wrong with it
    lost_rows: int = 0  # rows whose bytes are gone or damaged: not even their id can be read
    from_pages: int = 0  # rows SQLite could not reach, found on their pages
    missing_pages: int = 0  # pages the header counts that the file no longer has (its end cut off)
    header_damaged: bool = False  # its first bytes are not SQLite's header: the pages were read without it


@dataclass
class CheckReport:
    path: str
    integrity: list[str]  # SQLite's integrity check: ["ok"] or its problems
    records: int
    trials: int
    invalid: dict[str, str]
    lost_rows: int
    from_pages: int = 0
    missing_pages: int = 0
    header_damaged: bool = False

    @property
    def ok(self) -> bool:
        return (
            self.integrity == ["ok"]
            and not self.invalid
            and not self.lost_rows
            and not self.missing_pages
            and not self.header_damaged
        )


def _open(path: Path) -> sqlite3.Connection | None:
    """The file as SQLite reads it, read-only; None when SQLite cannot read even its schema."""
    uri = path.resolve().as_uri()
    for mode in ("mode=ro", "immutable=1"):  # immutable: a WAL store on a read-only file system
        try:
            db = sqlite3.connect(f"{uri}?{mode}", uri=True, isolation_level=None)
        except sqlite3.Error:
            continue
        try:
            db.execute("PRAGMA writable_schema = ON")  # lets SQLite read a file shorter than its header says
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error:
            db.close()
    return None


def _row(db: sqlite3.Connection | None, table: str, rowid: int) -> tuple | None | bool:
    """The row, None when there is none, False when its page cannot be read."""
    if db is None:
        return False
    try:
        return db.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
    except sqlite3.Error:
        return False


def _last_rowid(db: sqlite3.Connection | None, table: str) -> int:
    if db is None:
        return 0
    try:
        return db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.Error:  # the b-tree's right edge is damaged: the page scan says how far rows go
        return 0


def _read_table(db, table: str, width: int, on_pages: dict[int, list]) -> tuple[list[list], int, int]:
    """(rows, lost, found only on their pages) of a table whose rows have `width` columns."""
    rows, lost, from_pages = [], 0, 0
    for rowid in range(1, max(_last_rowid(db, table), max(on_pages, default=0)) + 1):
        row = _row(db, table, rowid)
        if row and len(row) == width:
            rows.append(list(row))
        elif rowid in on_pages:
            rows.append(on_pages[rowid])
            from_pages += 1
        elif row is False:
            lost += 1
    return rows, lost, from_pages


def _on_pages(scan: pages.Scan, width: int, shape, newer=None) -> dict[int, list]:
    """The rows of one table found on its pages, by rowid. A rowid seen twice (an old copy on a
    page SQLite freed, when a damaged header hides the freelist) keeps the copy `newer` ranks
    higher (a trial's latest update), else the first."""
    found: dict[int, list] = {}
    for _, rowid, values in scan.rows:
        if len(values) == width and shape(values):
            if rowid not in found or (newer is not None and newer(values) > newer(found[rowid])):
                found[rowid] = values
    return found


def _is_run(values: list) -> bool:
    return isinstance(values[0], str) and isinstance(values[-1], str) and values[-1].startswith("{")


def _is_trial(values: list) -> bool:
    return isinstance(values[0], str) and isinstance(values[2], int) and isinstance(values[5], str)


def _scan(path: Path) -> pages.Scan:
    """The file's pages, mapped rather than read (a store can hold gigabytes of telemetry)."""
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return pages.Scan(4096, 0)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return pages.scan(data)


def _header_pages(path: Path) -> int:
    """The database size in pages the header states (fileformat 1.3.7), 0 where it cannot say."""
    with open(path, "rb") as handle:
        header = handle.read(pages.HEADER_BYTES)
    if len(header) < pages.HEADER_BYTES or not header.startswith(schema.SQLITE_HEADER):
        return 0
    valid = header[24:28] == header[92:96]  # the change counter matches "version-valid-for"
    return int.from_bytes(header[28:32], "big") if valid else 0


def read_contents(path: Path, db: sqlite3.Connection | None, scan: pages.Scan | None = None) -> Contents:
    """Every record and trial of the file at `path`: through `db` (the file opened by _open, None
    where SQLite cannot read it), then from its pages (`scan`, when read already)."""
    out = Contents()
    scan = scan or _scan(path)
    out.header_damaged = not _header_intact(path)
    out.missing_pages = max(0, _header_pages(path) - scan.pages)
    runs, lost, found = _read_table(db, "runs", RUN_COLUMNS, _on_pages(scan, RUN_COLUMNS, _is_run))
    out.lost_rows += lost
    out.from_pages += found
    for row in runs:
        try:
            out.records.append(parse_record(row[-1]))
        except ValidationError as exc:
            out.invalid[f"run {row[0]}"] = problem(exc)
    trials, lost, found = _read_table(
        db, "trials", TRIAL_COLUMNS, _on_pages(scan, TRIAL_COLUMNS, _is_trial, lambda t: str(t[-1]))
    )
    out.lost_rows += lost
    out.from_pages += found
    for row in trials:
        t = dict(zip(TRIAL_FIELDS, row))
        try:
            out.trials.append(
                {
                    "sweep": t["sweep"],
                    "key": t["trial_key"],
                    "index": int(t["trial_index"]),
                    "sweep_hash": t["sweep_hash"],
                    "status": t["status"],
                    "params": json.loads(t["params_json"]),
                    "result": json.loads(t["result_json"]) if t["result_json"] else None,
                    "updated_utc": t["updated_utc"],
                }
            )
        except (TypeError, ValueError) as exc:
            out.invalid[f"trial {t['sweep']}/{t['trial_key']}"] = f"not readable JSON ({exc})"
    return out


def _integrity(db: sqlite3.Connection | None) -> list[str]:
    """SQLite's own check of the file (PRAGMA integrity_check): ["ok"], or what is wrong (the
    first 50 problems)."""
    if db is None:
        return ["SQLite cannot read the file's schema (its first page is damaged)"]
    try:
        return [row[0] for row in db.execute("PRAGMA integrity_check(50)")]
    except sqlite3.DatabaseError as exc:  # too damaged for the check itself to run
        return [str(exc)]


@contextmanager
def _opened(path: Path):
    """The file opened by _open for as long as it is read (None where SQLite cannot read it)."""
    db = _open(path)
    try:
        yield db
    finally:
        if db is not None:
            db.close()


def _readable_store(path: Path | None) -> tuple[Path, pages.Scan | None]:
    """The store's path once it is known to be a file that can be looked at: gpuscout's checks
    (not SQLite's, which a damaged file fails) refuse a folder, a missing, empty or foreign file.
    A file whose header is damaged (its first page zeroed) is a store still when its pages hold
    gpuscout's rows: then with the scan that found them."""
    path = Path(path) if path is not None else default_store_path()
    if not path.exists():
        raise StoreError(f"no results store at {path}: pass the damaged store with --store")
    try:
        schema.refuse_foreign_file(path)
    except StoreError:
        if not path.is_file() or path.stat().st_size == 0:
            raise
        scan = _scan(path)
        if not (_on_pages(scan, RUN_COLUMNS, _is_run) or _on_pages(scan, TRIAL_COLUMNS, _is_trial)):
            raise
        return path, scan
    return path, None


def _header_intact(path: Path) -> bool:
    with open(path, "rb") as handle:
        return pages.header_intact(handle.read(pages.HEADER_BYTES))


def check(path: Path | None) -> CheckReport:
    """SQLite's integrity check, then every record and trial read and validated, through SQLite
    and page by page."""
    path, scan = _readable_store(path)
    with _opened(path) as db:
        contents = read_contents(path, db, scan)
        integrity = _integrity(db)
    return CheckReport(
        str(path),
        integrity,
        len(contents.records),
        len(contents.trials),
        contents.invalid,
        contents.lost_rows,
        contents.from_pages,
        contents.missing_pages,
        contents.header_damaged,
    )


@dataclass
class SalvageReport:
    source: str
    out: str
    records: int
    trials: int
    invalid: dict[str, str]
    lost_rows: int
    from_pages: int = 0
    missing_pages: int = 0
    header_damaged: bool = False


def salvage(path: Path | None, out: Path) -> SalvageReport:
    """Copy every readable, valid record and trial of the store at `path` into a new store at
    `out` (which must not exist: nothing is ever overwritten)."""
    if out.exists() or out.is_symlink():
        raise StoreError(f"{out} exists: --out names the new store salvage writes, a file that does not exist yet")
    path, scan = _readable_store(path)
    with _opened(path) as db:
        contents = read_contents(path, db, scan)
    with Store(out) as fresh:
        fresh.put_many(contents.records)
        for t in contents.trials:
            fresh.put_trial(
                t["sweep"],
                t["key"],
                t["index"],
                t["sweep_hash"],
                t["status"],
                t["params"],
                t["result"],
                t["updated_utc"],
            )
    return SalvageReport(
        str(path),
        str(out),
        len(contents.records),
        len(contents.trials),
        contents.invalid,
        contents.lost_rows,
        contents.from_pages,
        contents.missing_pages,
        contents.header_damaged,
    )
