"""Nothing a user types loses their results (issue 30), through the real CLI: outputs never written
over the store or a file gpuscout did not write, SIGTERM and a background job's Ctrl-C keep a
watched script's record, and bytes that are not UTF-8 never lose one. Each bad input checks the
exit code, the one line and that the store is unchanged (its sha256)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.conftest import FIXTURES, SRC, alive, run_cli

PY = sys.executable
LOOP = str(FIXTURES / "watch" / "loop.py")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_exit_2(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


@pytest.fixture
def stored_once(tmp_path) -> Path:
    """A store with one watched run in it (a loop of 5 steps)."""
    store = tmp_path / "results.sqlite"
    done = run_cli("watch", "--quiet", "--store", str(store), "--", PY, LOOP, "marked", "5")
    assert done.returncode == 0, done.stderr
    return store


def test_outputs_never_overwrite_the_store_or_a_file_gpuscout_did_not_write(stored_once, tmp_path):
    store, before = stored_once, sha256(stored_once)
    for args in (("report", "--out", str(store)), ("results", "export", "-o", str(store)),
                 ("report", "--out", str(store), "--force")):  # the store: not even with --force
        one_line_exit_2(run_cli(*args, "--store", str(store)), "is the results store itself")
    other = tmp_path / "other.sqlite"  # another store, or any SQLite file
    other.write_bytes(store.read_bytes())
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes</p>")
    one_line_exit_2(run_cli("results", "export", "-o", str(other), "--store", str(store)), "is an SQLite database")
    one_line_exit_2(run_cli("report", "--out", str(mine), "--store", str(store)), "gpuscout did not write it")
    assert mine.read_text() == "<p>my notes</p>" and sha256(other) == sha256(store) == before
    # a report gpuscout wrote is replaced; the user's file only with --force; no partial file left behind
    for _ in range(2):
        assert run_cli("report", "--out", str(tmp_path / "r.html"), "--store", str(store)).returncode == 0
        assert run_cli("results", "export", "-o", str(tmp_path / "e.csv"), "--format", "csv",
                       "--store", str(store)).returncode == 0
    assert run_cli("report", "--out", str(mine), "--force", "--store", str(store)).returncode == 0
    assert "<!doctype html>" in mine.read_text()
    assert not list(tmp_path.glob(".*.partial")) and sha256(store) == before


def _watch_in_background(store: Path, ignore_sigint: bool) -> subprocess.Popen:
    """gpuscout watch of an endless loop, started as a shell's background job would be."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    return subprocess.Popen([PY, "-m", "gpuscout", "watch", "--quiet", "--store", str(store), "--", PY, LOOP,
                             "forever", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None)


@pytest.mark.parametrize("sig, code, ignored", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
                         ids=["sigterm", "sigint-in-a-background-job"])
def test_a_stop_signal_keeps_the_record_and_leaves_nothing_behind(sig, code, ignored, tmp_path):
    store = tmp_path / "results.sqlite"
    proc = _watch_in_background(store, ignored)
    child = int(proc.stdout.readline().split()[1])
    time.sleep(2.5)  # a couple of one-second windows
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted cleanly after" in out  # the script got SIGINT and ran its own handler
    assert not alive(child)
    with Store(store, create=False) as s:
        record, = s.list(kind="watch")
    assert record.status == "interrupted" and record.interrupted_by == signal.Signals(sig).name
    assert record.main.steps > 30 and record.windows
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"gpuscout-watch-{proc.pid}-*")]


def test_bytes_that_are_not_utf8_never_lose_a_record(tmp_path):
    """In the script's argv, the folder it runs in and what it prints."""
    script = tmp_path / "bytes.py"
    script.write_text('import sys\nsys.stdout.buffer.write(b"out \\xff\\xfe\\n")\nsys.stdout.flush()\n'
                      'sys.stderr.buffer.write(b"err \\xed\\xa0\\x80\\n")\nsys.exit(1)\n')
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/dir\xff"))
    folder.mkdir()
    store = tmp_path / "results.sqlite"
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    done = subprocess.run([os.fsencode(PY), b"-m", b"gpuscout", b"watch", b"--quiet", b"--store", bytes(store),
                           b"--", os.fsencode(PY), bytes(script), b"arg-\xff"],
                          cwd=folder, capture_output=True, env=env, timeout=120)
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    with Store(store, create=False) as s:
        record, = s.list(kind="watch")
    assert record.status == "failed" and record.command[-1] == "arg-\ufffd" and record.cwd.endswith("dir\ufffd")
    assert json.loads(record.model_dump_json())["command"][-1] == "arg-\ufffd"
