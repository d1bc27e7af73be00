"""Nothing a user types loses their results (issue 30), through the real CLI: outputs never written
over the store or a file gpuscout did not write, SIGTERM and a background job's Ctrl-C keep a
watched script's record, and bytes that are not UTF-8 never lose one. Each bad input checks the
exit code, the one line and that the store is unchanged (its sha256)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.cli_checks import one_line_exit_2, until_loop_step
from tests.conftest import FIXTURES, SRC, alive, run_cli

PY = sys.executable
LOOP = str(FIXTURES / "watch" / "loop.py")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stored_once(tmp_path) -> Path:
    """A store with one watched run in it (a loop of 5 steps)."""
    store = tmp_path / "results.sqlite"
    done = run_cli("watch", "--quiet", "--store", str(store), "--", PY, LOOP, "marked", "5")
    assert done.returncode == 0, done.stderr
    return store


def test_outputs_never_overwrite_the_store_or_a_file_gpuscout_did_not_write(stored_once, tmp_path):
    store, before = stored_once, sha256(stored_once)
    for args in (
        ("report", "--out", str(store)),
        ("results", "export", "-o", str(store)),
        ("report", "--out", str(store), "--force"),
    ):  # the store: not even with --force
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
        assert (
            run_cli(
                "results", "export", "-o", str(tmp_path / "e.csv"), "--format", "csv", "--store", str(store)
            ).returncode
            == 0
        )
    assert run_cli("report", "--out", str(mine), "--force", "--store", str(store)).returncode == 0
    assert "<!doctype html>" in mine.read_text()
    assert not list(tmp_path.glob(".*.partial")) and sha256(store) == before


def _watch_in_background(store: Path, ignore_sigint: bool) -> subprocess.Popen:
    """gpuscout watch of an endless loop, started as a shell's background job would be."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="")
    return subprocess.Popen(
        [PY, "-m", "gpuscout", "watch", "--quiet", "--store", str(store), "--", PY, LOOP, "forever", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
    )


@pytest.mark.parametrize(
    "sig, code, ignored",
    [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
    ids=["sigterm", "sigint-in-a-background-job"],
)
def test_a_stop_signal_keeps_the_record_and_leaves_nothing_behind(sig, code, ignored, tmp_path):
    store = tmp_path / "results.sqlite"
    proc = _watch_in_background(store, ignored)
    child = int(proc.stdout.readline().split()[1])
    until_loop_step(proc, 120)  # 3 s of its 25 ms steps: a couple of the instrumentation's one-second windows
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted cleanly after" in out  # the script got SIGINT and ran its own handler
    assert not alive(child)
    with Store(store, create=False) as s:
        (record,) = s.list(kind="watch")
    assert record.status == "interrupted" and record.interrupted_by == signal.Signals(sig).name
    assert record.main.steps > 30 and record.windows
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"gpuscout-watch-{proc.pid}-*")]


def test_bytes_that_are_not_utf8_never_lose_a_record(tmp_path):
    """In the script's argv, the folder it runs in and what it prints."""
    script = tmp_path / "bytes.py"
    script.write_text(
        'import sys\nsys.stdout.buffer.write(b"out \\xff\\xfe\\n")\nsys.stdout.flush()\n'
        'sys.stderr.buffer.write(b"err \\xed\\xa0\\x80\\n")\nsys.exit(1)\n'
    )
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/dir\xff"))
    folder.mkdir()
    store = tmp_path / "results.sqlite"
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="")
    done = subprocess.run(
        [
            os.fsencode(PY),
            b"-m",
            b"gpuscout",
            b"watch",
            b"--quiet",
            b"--store",
            bytes(store),
            b"--",
            os.fsencode(PY),
            bytes(script),
            b"arg-\xff",
        ],
        cwd=folder,
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    with Store(store, create=False) as s:
        (record,) = s.list(kind="watch")
    assert record.status == "failed" and record.command[-1] == "arg-\ufffd" and record.cwd.endswith("dir\ufffd")
    assert json.loads(record.model_dump_json())["command"][-1] == "arg-\ufffd"


def test_bad_numbers_files_ids_and_grids_are_one_line_and_change_nothing(stored_once, tmp_path):
    """Issue 30, items 6-11: nan, inf and negative numbers, implausible epochs, a binary catalog,
    a JSON nested 100,000 deep, /dev/zero as an import, a sweep file and a log, an id of 100,000
    characters, an unknown status, a grid of 10^12 points: each exit 2 with one line, at once."""
    store, before = stored_once, sha256(stored_once)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    binary = tmp_path / "catalog.toml"
    binary.write_bytes(bytes(range(256)))
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: big\ncommand: echo {a} {b} {c} {d}\nreports: [x]\nmetric: {name: x, direction: max}\n"
        "space:\n" + "".join(f"  {axis}: {list(range(1000))}\n" for axis in "abcd")
    )
    cases = [
        (("bench", "mlp", "--cpu", "--timeout", "nan"), "--timeout must be a duration like 20s, 6m, 1.5h or 3d"),
        (("bench", "mlp", "--cpu", "--window-seconds", "inf"), "--window-seconds takes a finite number"),
        (
            ("tune", "mlp", "--cpu", "--budget-minutes", "-3"),
            "--budget-minutes must be a duration like 20s, 6m, 1.5h or 3d (a bare number is minutes), got '-3'",
        ),
        (("recommend", "--workload", "resnet50", "--epochs", "nan"), "--epochs takes a finite number"),
        (("recommend", "--workload", "resnet50", "--epochs", "1e308"), "--epochs takes a finite number from 0 to"),
        (("catalog", "--catalog", str(binary)), "is not a text file (it holds NUL bytes): not a catalog"),
        (("results", "import", str(deep)), "nests deeper than 200 levels: not a gpuscout results file"),
        (("results", "import", "/dev/zero"), "is a device, not a file: give a gpuscout results file"),
        (("sweep", "/dev/zero", "--dry-run"), "is a device, not a file: give a sweep file"),
        (("doctor", "--explain", "/dev/zero"), "a device or socket, not a log file: give a file, or -"),
        (("results", "show", "a" * 100_000), "is not a run id: ids are up to 64 letters"),
        (("results", "list", "--status", "bogus"), "unknown --status 'bogus': choose ok, oom, failed"),
        (("sweep", str(grid), "--dry-run"), "the grid has 1,000,000,000,000 points (1000 x 1000 x 1000 x 1000)"),
    ]
    for args, fragment in cases:
        started = time.monotonic()
        result = run_cli(*args, env={"GPUSCOUT_STORE": str(store)}, timeout=60)
        one_line_exit_2(result, fragment)
        assert time.monotonic() - started < 30, args
    assert sha256(store) == before


def test_record_text_never_reaches_the_terminal_raw_nor_breaks_a_markdown_table(stored_once, tmp_path):
    """Items 13 and 14: an imported record whose workload holds a window-title and a clear-screen
    sequence, a `|` and a backtick is said to hold them on import, shown escaped by `results
    list/show`, and kept to its own cell in the Markdown report."""
    store = stored_once
    exported = json.loads(run_cli("results", "export", "--store", str(store)).stdout)
    run = exported["runs"][0]
    run["id"], run["workload"] = "hostile01", "evil\x1b]0;pwned\x07\x1b[2J|`x` model"
    doc = tmp_path / "hostile.json"
    doc.write_text(json.dumps(exported))
    imported = run_cli("results", "import", str(doc), "--store", str(store))
    assert imported.returncode == 0, imported.stderr
    assert "1 record(s) hold control characters in their text (run hostile01: workload" in imported.stderr
    original = run["id"]
    exported_again = json.loads(run_cli("results", "export", "--store", str(store)).stdout)
    original = next(r["id"] for r in exported_again["runs"] if r["id"] != "hostile01")
    for args in (("results", "list"), ("results", "show", "hostile01"), ("compare", "hostile01", original)):
        shown = run_cli(*args, "--store", str(store))
        assert "\x1b" not in shown.stdout + shown.stderr, args
    # escaped where it is shown (rich drops the bell itself)
    assert "evil\\x1b]0;pwned" in run_cli("results", "show", "hostile01", "--store", str(store)).stdout
    report = tmp_path / "r.md"
    assert run_cli("report", "--markdown", "--out", str(report), "--store", str(store)).returncode == 0
    row = next(line for line in report.read_text().splitlines() if line.startswith("| hostile01 |"))
    cells = [c for c in re.split(r"(?<!\\)\|", row)[1:-1]]
    header = next(line for line in report.read_text().splitlines() if line.startswith("| id |") and "script" in line)
    assert len(cells) == header.count("|") - 1  # the `|` in the name did not split the row
    assert "evil\\\\x1b\\]0;pwned" in row and "\\|\\`x\\` model" in row
