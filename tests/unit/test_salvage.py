"""A damaged store gives up every record whose bytes are intact (issue 44, item 5): SQLite's own
recovery reads leaf pages whatever happened above them, and so does `results salvage`.

Each store here holds one record per leaf page (each ~3 KB of a 4 KiB page), so which records a
damage takes is known by hand: the leaf pages of `runs` in b-tree order (dbstat's path) hold
rowids 1, 2, 3... in that order. What a damage leaves is checked against that list, never
against what the reader itself finds on the intact file."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess

import pytest

from gpuscout.record.run import Telemetry, TelemetrySample
from gpuscout.store import Store, repair
from gpuscout.store.failures import StoreFailure
from tests.records import make_record

PAGE = 4096
RECORDS = 6


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leaves(path) -> list[int]:
    """The pages of `runs`' leaves, in rowid order; its root (interior) page first."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT pageno, pagetype FROM dbstat WHERE name = 'runs' ORDER BY path").fetchall()
    assert rows[0][1] == "internal" and all(kind == "leaf" for _, kind in rows[1:])
    return [page for page, _ in rows]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "results.sqlite"
    with Store(path) as s:
        for i in range(RECORDS):
            s.put(make_record(f"run{i:04d}", median=100.0 + i, rates=[100.0 + i] * 6))
        s.put_trial("sw", "k1", 0, "h", "ok", {"x": 1}, {"metrics": {"m": 1.0}}, "2026-11-26T00:00:00Z")
    pages = _leaves(path)
    assert len(pages) == RECORDS + 1  # one record a leaf: the premise of every count below
    return path, pages


def _overwrite(path, page: int, data: bytes = b"\xde\xad" * (PAGE // 2), at: int = 0) -> None:
    with open(path, "r+b") as handle:
        handle.seek((page - 1) * PAGE + at)
        handle.write(data[: PAGE - at])


def _salvaged_ids(path, tmp_path) -> tuple[set[str], repair.SalvageReport]:
    out = tmp_path / "salvaged.sqlite"
    out.unlink(missing_ok=True)
    before = _digest(path)
    report = repair.salvage(path, out)
    assert _digest(path) == before  # the damaged file is only read
    with Store(out, readonly=True) as fresh:
        assert repair.check(out).ok
        return {r.id for r in fresh.list()}, report


ALL = {f"run{i:04d}" for i in range(RECORDS)}


def test_its_end_cut_off_the_rows_before_it_are_salvaged(store, tmp_path):
    """The drill's case: SQLite refused the whole file (it is shorter than its header says)."""
    path, pages = store
    last = max(pages)
    assert last == path.stat().st_size // PAGE  # the last page of the file holds a record
    lost = f"run{pages[1:].index(last):04d}"
    with open(path, "r+b") as handle:
        handle.truncate((last - 1) * PAGE)
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == ALL - {lost} and report.missing_pages == 1 and report.trials == 1
    found = repair.check(path)
    assert found.records == RECORDS - 1 and found.missing_pages == 1 and not found.ok


def test_a_damaged_interior_page_costs_no_row(store, tmp_path):
    path, pages = store
    _overwrite(path, pages[0])  # runs' root: SQLite reaches none of its rows
    with pytest.raises(StoreFailure, match="is damaged .* results salvage"):
        with Store(path, readonly=True) as s:
            s.list()
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == ALL and report.from_pages == RECORDS and report.lost_rows == 0


def test_a_damaged_schema_page_costs_no_row(store, tmp_path):
    path, _ = store
    _overwrite(path, 1, b"\x00" * PAGE, at=100)  # sqlite_master: the header's 100 bytes kept
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == ALL and report.trials == 1
    assert repair.check(path).integrity == ["SQLite cannot read the file's schema (its first page is damaged)"]


def test_a_damaged_leaf_costs_its_row_and_is_counted(store, tmp_path):
    path, pages = store
    _overwrite(path, pages[3])  # the leaf of rowid 3
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == ALL - {"run0002"} and report.lost_rows == 1 and report.from_pages == 0


def test_a_record_over_overflow_pages_is_read_from_its_chain(tmp_path):
    """A record of ~400 KB (a long run's telemetry) spans a chain of overflow pages; with the
    table's root damaged it is found from its leaf and its chain, and one damaged page of the
    chain loses it (named), never a wrong record."""
    path = tmp_path / "results.sqlite"
    samples = [TelemetrySample(t_monotonic_s=float(i), gpu_util_pct=50.0, power_w=300.0) for i in range(6000)]
    big = make_record(
        "big00001", telemetry=Telemetry(interval_s=0.1, sample_count=6000, window_sample_count=6000, samples=samples)
    )
    with Store(path) as s:
        s.put_many([make_record("small001"), big, make_record("small002")])
    with sqlite3.connect(path) as db:
        overflow = [
            p
            for (p,) in db.execute(
                "SELECT pageno FROM dbstat WHERE name = 'runs' AND pagetype = 'overflow' ORDER BY pageno"
            )
        ]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    assert len(overflow) > 50
    damaged = tmp_path / "root.sqlite"
    shutil.copy(path, damaged)
    _overwrite(damaged, root)
    ids, report = _salvaged_ids(damaged, tmp_path)
    assert ids == {"small001", "big00001", "small002"} and report.from_pages == 3
    with Store(tmp_path / "salvaged.sqlite", readonly=True) as fresh:
        assert fresh.get("big00001") == big  # every sample back, in order
    _overwrite(damaged, overflow[len(overflow) // 2], b"\x00" * 4 + b"x" * (PAGE - 4))  # the chain cut
    ids, report = _salvaged_ids(damaged, tmp_path)
    assert ids == {"small001", "small002"} and report.lost_rows == 1


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 command-line shell on this machine")
def test_salvage_finds_at_least_what_sqlites_own_recovery_finds(store, tmp_path):
    """The reference: the sqlite3 shell's `.recover` (SQLite's recovery extension)."""
    path, pages = store
    _overwrite(path, pages[0])
    _overwrite(path, pages[2])
    dump = subprocess.run(["sqlite3", str(path), ".recover"], capture_output=True, text=True, timeout=60).stdout
    theirs = {f"run{i:04d}" for i in range(RECORDS) if f"'run{i:04d}'" in dump}
    ids, _ = _salvaged_ids(path, tmp_path)
    assert theirs <= ids == ALL - {"run0001"}


def test_a_zeroed_first_page_header_and_all_costs_no_row(store, tmp_path):
    """Issue 59, item 5: page 1 zeroed, SQLite's header with it: the file is still a store whose
    pages hold every row (the page size found by trying each SQLite allows), check says what is
    damaged instead of "not an SQLite file", and salvage takes every record and the trial."""
    path, _ = store
    _overwrite(path, 1, b"\x00" * PAGE)
    found = repair.check(path)
    assert found.header_damaged and found.records == RECORDS and found.trials == 1 and not found.ok
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == ALL and report.trials == 1 and report.header_damaged and report.lost_rows == 0


def test_a_store_of_another_page_size_is_read_without_its_header(tmp_path):
    """A page size other than SQLite's default, with the header that says it zeroed: found by
    trying each, as the one whose pages decode rows."""
    path = tmp_path / "small-pages.sqlite"
    with Store(path) as s:
        s.put(make_record("run0000"))
    with sqlite3.connect(path) as db:  # rebuilt with 1 KiB pages (a store copied from elsewhere)
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA page_size = 1024")
        db.execute("VACUUM")
    with open(path, "r+b") as handle:
        handle.write(b"\x00" * 1024)
    ids, report = _salvaged_ids(path, tmp_path)
    assert ids == {"run0000"} and report.header_damaged


def test_a_file_with_no_store_in_its_pages_is_still_refused(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"\x00" * PAGE * 3)
    with pytest.raises(Exception, match="not an SQLite file"):
        repair.check(path)
