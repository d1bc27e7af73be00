import hashlib
import multiprocessing
import sqlite3
import threading

import pytest

from gpuscout.store import SCHEMA_VERSION, Store, StoreError
from tests.records import make_record as record


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_round_trip_and_prefix_lookup(store_path):
    with Store(store_path) as store:
        store.put(record("abc123", median=12.5))
        store.put(record("abd999", workload="resnet50"))
    with Store(store_path, create=False) as store:
        assert store.get("abc123").throughput.median == 12.5
        assert store.get("abc").id == "abc123"
        assert store.get("abc") == record("abc123", median=12.5)  # every field back as it went in
        assert [r.id for r in store.list(workload="resnet50")] == ["abd999"]
        with pytest.raises(StoreError, match=r"ambiguous \((abc123, abd999|abd999, abc123)\)"):
            store.get("ab")  # the candidates named
        with pytest.raises(StoreError, match="is not a run id"):
            store.get("ab%")  # never a LIKE pattern, never a query for it
        with pytest.raises(StoreError, match="no run 'zz'"):
            store.get("zz")


def test_duplicate_id_is_refused_and_store_unchanged(store_path):
    with Store(store_path) as store:
        store.put(record("same"))
        with pytest.raises(StoreError, match="already stored with different contents"):
            store.put(record("same", median=1.0))
        assert store.count() == 1 and store.get("same").throughput.median == 100.0


def test_missing_store_is_not_created_for_reading(tmp_path):
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


def test_newer_schema_is_refused_naming_both_versions(store_path):
    Store(store_path).close()
    db = sqlite3.connect(store_path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = digest(store_path)
    with pytest.raises(StoreError, match=rf"schema {SCHEMA_VERSION + 1}.*reads schema {SCHEMA_VERSION}"):
        Store(store_path)
    assert digest(store_path) == before


def test_foreign_sqlite_file_is_refused(store_path):
    db = sqlite3.connect(store_path)
    db.execute("CREATE TABLE other (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a gpuscout results store"):
        Store(store_path)


def test_corrupt_file_is_refused_and_left_alone(store_path):
    store_path.write_bytes(b"this is not a database at all" * 100)
    before = digest(store_path)
    with pytest.raises(StoreError, match="not a usable gpuscout results store"):
        Store(store_path)
    assert digest(store_path) == before


def test_unwritable_location_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the results store"):
        Store(blocker / "sub" / "results.sqlite")


def test_opening_waits_for_a_writer_that_comes_between_check_and_wal(store_path, monkeypatch):
    # The race CI hit with 4 processes opening one new store: the schema check has committed,
    # another process takes the write lock, and the switch to WAL is then refused at once
    # (SQLite calls no busy handler there). Made deterministic: the other writer is started
    # exactly between the two steps and commits 0.3 s later.
    Store(store_path).close()
    raw = sqlite3.connect(store_path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = DELETE")  # as a store is before its first open ends
    raw.close()
    writer = sqlite3.connect(store_path, isolation_level=None, check_same_thread=False)
    release = threading.Timer(0.3, writer.execute, ("COMMIT",))
    check = Store._check_writable

    def check_then_competing_writer(self):
        check(self)
        writer.execute("BEGIN IMMEDIATE")
        release.start()

    monkeypatch.setattr(Store, "_check_writable", check_then_competing_writer)
    try:
        with Store(store_path) as store:
            assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            store.put(record("after-wait"))
            assert store.count() == 1
    finally:
        release.join()
        writer.close()


def _writer(path: str, worker: int, count: int) -> None:
    with Store(path) as store:
        for i in range(count):
            store.put(record(f"w{worker}-{i}"))


def test_concurrent_writers_lose_nothing(store_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(store_path), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(store_path) as store:
        assert store.count() == 100
        assert len({r.id for r in store.list()}) == 100


def test_an_empty_or_foreign_file_is_never_written(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    for kwargs in ({}, {"readonly": True}):
        with pytest.raises(StoreError, match="is an empty file .0 bytes., not a gpuscout results store"):
            Store(empty, **kwargs)
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)


def limit_pages(store: Store, extra: int | None) -> None:
    """SQLite's page limit as a full disk: no page beyond the file's present size (extra=0)."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + extra if extra is not None else 2**31 - 2}")


def test_records_the_store_cannot_take_are_saved_beside_it_and_stored_when_it_comes_back(store_path):
    import json

    from gpuscout.core.errors import RunError
    from gpuscout.store.documents import parse_document

    with Store(store_path) as store:
        store.put(record("first"))
        limit_pages(store, 0)
        assert not store.keep([record("big", windows=[w for w in record("x").windows] * 200)])
        saved = store.rescue.path
        assert saved.parent == store_path.parent and saved.name.startswith("results.sqlite.unsaved-")
        assert [r.id for r in parse_document(saved.read_text(), "saved")] == ["big"]  # `results import` takes it
        assert "is full (database or disk is full)" in store.rescue.reason
        limit_pages(store, None)  # the disk has room again
        assert store.keep([record("next")])
        assert not saved.exists() and store.count() == 3 and store.rescue.records == []
    with pytest.raises(RunError, match=r"1 record\(s\) could not be stored: .* they are saved in .*unsaved-"):
        with Store(store_path) as store:  # the command ends with records unsaved: exit 1, naming the file
            limit_pages(store, 0)
            store.keep([record("last", windows=[w for w in record("x").windows] * 200)])
    assert json.loads(store.rescue.path.read_text())["runs"][0]["id"] == "last"


def corrupt_middle_pages(path, pages: int = 3) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        for k in range(pages):
            handle.seek((size // 4096 // 2 + k) * 4096)
            handle.write(b"\xde\xad" * 2048)


def test_a_damaged_file_is_named_checked_and_salvaged_into_a_new_store(tmp_path):
    from gpuscout.store import repair
    from gpuscout.store.failures import StoreFailure

    damaged = tmp_path / "damaged.sqlite"
    with Store(damaged) as store:
        store.put_many([record(f"run{i:04d}", median=100.0 + i) for i in range(200)])
        store.put_trial(
            "sw", "k", 0, "h", "ok", {"x": 1}, {"key": "k", "index": 0, "status": "ok", "metrics": {"m": 1}}, "now"
        )
    corrupt_middle_pages(damaged)
    before = digest(damaged)
    with Store(damaged, readonly=True) as store, pytest.raises(StoreFailure) as failure:
        store.list()
    assert str(failure.value).startswith(f"{damaged} is damaged (database disk image is malformed)")
    assert "gpuscout results salvage" in str(failure.value)
    report = repair.check(damaged)
    assert not report.ok and report.integrity != ["ok"] and report.lost_rows > 0
    assert report.records + report.lost_rows == 200 and report.trials == 1
    out = tmp_path / "salvaged.sqlite"
    done = repair.salvage(damaged, out)
    assert done.records == report.records and done.trials == 1
    with Store(out, readonly=True) as fresh:
        assert fresh.count() == report.records and fresh.trials("sw")[0].result.metrics == {"m": 1}
    assert repair.check(out).ok and digest(damaged) == before  # the damaged file is only read
    with pytest.raises(StoreError, match="exists"):
        repair.salvage(damaged, out)  # never over an existing file


def test_a_record_that_does_not_validate_is_named_by_check(store_path):
    with Store(store_path) as store:
        store.put_many([record("good"), record("bad")])
    with sqlite3.connect(store_path) as db:
        db.execute("UPDATE runs SET record_json = json_set(record_json, '$.batch_size', 'big') WHERE id = 'bad'")
    from gpuscout.store import repair

    report = repair.check(store_path)
    assert report.integrity == ["ok"] and report.records == 1 and not report.ok
    assert report.invalid == {
        "run bad": "batch_size: Input should be a valid integer, unable to parse string as an integer (got 'big')"
    }


def test_reading_opens_a_store_no_sweep_wrote_without_changing_it(store_path):
    with Store(store_path) as store:
        store.put(record("a"))
    with sqlite3.connect(store_path) as db:  # as a store from before sweeps: no trial tables
        db.execute("DROP TABLE trials")
        db.execute("DROP TABLE trial_leases")
    before = digest(store_path)
    with Store(store_path, readonly=True) as store:
        assert store.trials("any") == [] and store.leases("any") == {} and store.count() == 1
    assert digest(store_path) == before
