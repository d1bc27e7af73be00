"""The store under damage, a full disk and a read-only file system, through the CLI: one line that
says what is wrong and what to do, exit 2 before work and 1 after, no measurement lost, and no
file gpuscout did not make ever written."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from gpuscout.store import Store
from tests.cli_checks import FAKE_WORKER
from tests.conftest import SRC, run_cli
from tests.records import make_record


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(proc, code: int, *fragments: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error:"), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]
    return lines[-1]


def filled(path, n: int) -> None:
    with Store(path) as store:
        store.put_many([make_record(f"run{i:04d}", median=100.0 + i) for i in range(n)])


def test_a_damaged_store_says_so_in_one_line_and_is_checked_and_salvaged(tmp_path):
    store = tmp_path / "results.sqlite"
    filled(store, 200)
    size = store.stat().st_size
    with open(store, "r+b") as handle:  # three table pages in the middle overwritten
        for k in range(3):
            handle.seek((size // 4096 // 2 + k) * 4096)
            handle.write(b"\xde\xad" * 2048)
    before = digest(store)
    one_line(
        run_cli("results", "list", "--limit", "500", "--store", str(store)),
        2,
        f"{store} is damaged (database disk image is malformed)",
        "gpuscout results salvage",
    )
    check = run_cli("results", "check", "--store", str(store), "--json")
    assert check.returncode == 1
    found = json.loads(check.stdout)
    assert not found["ok"] and found["lost_rows"] > 0 and found["records"] + found["lost_rows"] == 200
    out = tmp_path / "salvaged.sqlite"
    salvaged = run_cli("results", "salvage", "--store", str(store), "--out", str(out))
    assert salvaged.returncode == 0, salvaged.stderr
    assert f"copied {found['records']} record(s)" in salvaged.stderr and "left behind:" in salvaged.stderr
    assert run_cli("results", "check", "--store", str(out)).returncode == 0
    assert digest(store) == before


def test_damaged_record_text_is_left_out_by_lists_and_named_by_show(tmp_path):
    import sqlite3

    store = tmp_path / "results.sqlite"
    filled(store, 4)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE runs SET record_json = '{not json' WHERE id = 'run0001'")
        db.execute("UPDATE runs SET record_json = X'FFFE00' WHERE id = 'run0002'")
    listed = run_cli("results", "list", "--store", str(store), "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["runs"]) == 2
    assert "run run0001 in" in listed.stderr and "is damaged and was left out" in listed.stderr
    one_line(run_cli("results", "show", "run0002", "--store", str(store)), 2, "run run0002 in", "is damaged")
    report = run_cli("report", "--out", str(tmp_path / "r.html"), "--store", str(store))
    assert report.returncode == 0 and "(2 runs)" in report.stderr + report.stdout


def test_an_empty_file_is_refused_and_left_empty(tmp_path):
    empty = tmp_path / "results.sqlite"
    empty.write_bytes(b"")
    one_line(run_cli("bench", "mlp", "--cpu", "--store", str(empty)), 2, "is an empty file (0 bytes)")
    one_line(run_cli("results", "list", "--store", str(empty)), 2, "is an empty file (0 bytes)")
    assert empty.read_bytes() == b"" and [p.name for p in tmp_path.iterdir()] == ["results.sqlite"]


# Run under `unshare -m` (a mount namespace of its own): a 2 MiB tmpfs holds the store, filled by
# another file or remounted read-only, and nothing of it is seen outside.
SCENARIO = """
import json, os, subprocess, sys
mount, out = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mount], check=True)
store, filler = os.path.join(mount, "results.sqlite"), os.path.join(mount, "filler")
env = dict(os.environ, GPUSCOUT_WORKER={worker!r}, COLUMNS="")
seen = {{}}

def gpuscout(name, *args, **extra):
    proc = subprocess.run([sys.executable, "-m", "gpuscout", *args, "--store", store], capture_output=True,
                          text=True, env=dict(env, **extra), cwd={cwd!r})
    seen[name] = {{"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}}

def count():
    import sqlite3
    db = sqlite3.connect(f"file:{{store}}?mode=ro", uri=True)
    try:
        return db.execute("select count(*) from runs").fetchone()[0]
    finally:
        db.close()  # an open file keeps the mount busy

gpuscout("first", "bench", "resnet18_cifar", "--cpu")
# the disk fills as run 1 ends and has room again for run 2, fills again as run 3 ends
gpuscout("filling", "bench", "resnet18_cifar", "--cpu", "--repeats", "3", FAKE_FILL=filler)
seen["stored_after_filling"] = count()
seen["free_after_filling"] = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
gpuscout("full_before", "bench", "resnet18_cifar", "--cpu")
os.remove(filler)
saved = [line for line in seen["filling"]["stderr"].splitlines() if line.startswith("error:")][-1]
rescue = saved.split("they are saved in ")[1].split(":")[0]
gpuscout("import", "results", "import", rescue)
seen["stored_after_import"] = count()
subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
for verb in (["results", "list"], ["results", "export", "--format", "csv"], ["results", "check"],
             ["report", "--out", os.path.join({cwd!r}, "r.html")]):
    gpuscout("ro " + " ".join(verb), *verb)
gpuscout("ro bench", "bench", "resnet18_cifar", "--cpu")
json.dump(seen, open(out, "w"))
"""


def test_a_full_disk_and_a_read_only_file_system(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to make a small file system")
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(SCENARIO.format(worker=FAKE_WORKER, cwd=str(tmp_path))))
    out = tmp_path / "seen.json"
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for unshare in (["unshare", "-m"], ["unshare", "-rm"]):  # as root, else in a user namespace
        probe = subprocess.run([*unshare, "mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True, text=True)
        if probe.returncode == 0:
            break
    else:
        pytest.skip(f"no mount namespace to make a small file system in: {probe.stderr.strip()[-300:]}")
    proc = subprocess.run(
        [*unshare, sys.executable, str(script), str(mount), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["first"]["rc"] == 0, seen["first"]["stderr"][-2000:]
    # measured 3 times; 2 stored as they came, 1 saved beside the store (which was full: the working folder)
    filling = seen["filling"]
    assert filling["rc"] == 1 and "Traceback" not in filling["stderr"]
    assert "note: this run could not be stored: the disk holding" in filling["stderr"]
    last = [line for line in filling["stderr"].splitlines() if line.startswith("error:")][-1]
    assert "1 record(s) could not be stored" in last and "is full" in last and str(tmp_path) in last
    assert seen["stored_after_filling"] == 1 + 2
    assert seen["free_after_filling"] < 1 << 20
    assert seen["full_before"]["rc"] == 2 and "is full" in seen["full_before"]["stderr"]
    assert "(nothing was run)" in seen["full_before"]["stderr"]
    assert seen["import"]["rc"] == 0 and seen["stored_after_import"] == 4  # nothing was lost
    for name in ("ro results list", "ro results export --format csv", "ro results check", "ro report --out"):
        verb = next(k for k in seen if k.startswith(name))
        assert seen[verb]["rc"] == 0, (verb, seen[verb]["stderr"][-1000:])
    assert seen["ro results export --format csv"]["stdout"].count("\n") == 1 + 4
    ro = seen["ro bench"]
    assert ro["rc"] == 2 and "is read-only" in ro["stderr"] and "still work" in ro["stderr"]
