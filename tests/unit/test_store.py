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
        with pytest.raises(StoreError, match="ambiguous"):
            store.get("ab")
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
    raw.execute("PRAGMA journal_mode = DELETE")   # as a store is before its first open ends
    raw.close()
    writer = sqlite3.connect(store_path, isolation_level=None, check_same_thread=False)
    release = threading.Timer(0.3, writer.execute, ("COMMIT",))
    check = Store._check_and_create

    def check_then_competing_writer(self):
        check(self)
        writer.execute("BEGIN IMMEDIATE")
        release.start()

    monkeypatch.setattr(Store, "_check_and_create", check_then_competing_writer)
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
