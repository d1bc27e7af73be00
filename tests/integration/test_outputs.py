"""Issue 59, items 2 and 3: one door for every byte gpuscout writes, one for every file it reads.

Every output the CLI has is found by reading the commands: a path-typed parameter (or one whose
help speaks of a file) that is neither declared a write nor a read in cli/options.py fails here,
so a new one cannot be forgotten. Each output is then driven through every kind of thing a name
can reach: the store by its path, a symlink, a hard link, a bind mount and standard output; the
name SQLite would take for its WAL through another spelling of its folder; its rescue file, by
name and by content; a foreign file and an SQLite file; a device node; a FIFO; a socket; a folder;
a name too long for the file system and one that just fits; another process's descriptor. Each
read goes through a FIFO nobody writes to, a device, a socket, a folder and a file too large.
Refusals run in one interpreter (tests/fixtures/cli_cases.py); each is one line, exit 2, within
seconds, and the store's bytes and every file outside the named output are unchanged."""

from __future__ import annotations

import inspect
import json
import os
import re
import socket
import stat
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
import typer

from gpuscout.cli import app
from gpuscout.cli.options import READS, STORE_AND_COMMANDS, WRITES
from tests.cli_checks import refused, run_cases, sha256
from tests.conftest import FIXTURES, SRC, run_cli
from tests.records import make_record

PY = sys.executable


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store" / "results.sqlite"
    path.parent.mkdir()
    from gpuscout.store import Store

    with Store(path) as s:
        s.put_many([make_record("run00001"), make_record("run00002", median=120.0)])
    return path


def commands():
    """(command path, parameter name, its annotation and its typer info) for every parameter of
    every command, read from the command functions as typer registers them."""

    def walk(typer_app, prefix):
        for info in typer_app.registered_commands:
            name = info.name or info.callback.__name__
            yield f"{prefix}{name}", info.callback
        for group in typer_app.registered_groups:
            yield from walk(group.typer_instance, f"{prefix}{group.name} ")

    for path, callback in walk(app, ""):
        hints = typing.get_type_hints(callback, include_extras=True)
        for name, param in inspect.signature(callback).parameters.items():
            hint = hints.get(name)
            infos = [*getattr(hint, "__metadata__", ()), param.default]
            info = next((i for i in infos if isinstance(i, (typer.models.OptionInfo, typer.models.ArgumentInfo))), None)
            yield path, name, hint, info


def names_a_file(hint, info) -> bool:
    """A parameter is a file's name when it is typed Path, or its help or metavar speak of a file
    (not of another option's: `--patch FILE` in --force's help is --patch's)."""
    if "Path" in str(hint):
        return True
    words = re.sub(r"--[\w-]+ \w+", "", f"{getattr(info, 'help', '') or ''} {getattr(info, 'metavar', '') or ''}")
    return bool(re.search(r"\b(file|folder|dir)\b|\w\.(py|toml|json|yaml|npz|keras)\b", words, re.IGNORECASE))


def test_every_parameter_that_names_a_file_is_a_declared_write_or_read():
    found = {(path, name) for path, name, hint, info in commands() if names_a_file(hint, info)}
    undeclared = {(path, name) for path, name in found if name not in STORE_AND_COMMANDS} - WRITES - READS
    assert not undeclared, f"declare these in cli/options.py WRITES or READS (and drive them here): {undeclared}"
    assert WRITES | READS <= found | {(p, n) for p, n, *_ in commands()}  # no stale declaration
    assert set(OUTPUTS) == WRITES and set(INPUTS) == READS  # each declared one is driven below


SCRIPT = "print('hi')\n"


def _tune(target, store, *extra):
    return ["tune", "--patch", str(target), *extra, "--store", str(store), "--dry-run", "--", PY, "x.py"]


# How each output is reached on the command line, with the options it needs: (target, store, *extra)
OUTPUTS = {
    ("report", "out"): lambda t, s, *e: ["report", "--out", str(t), *e, "--store", str(s)],
    ("results export", "out"): lambda t, s, *e: ["results", "export", "-o", str(t), *e, "--store", str(s)],
    ("results salvage", "out"): lambda t, s, *e: ["results", "salvage", "-o", str(t), "--store", str(s)],
    ("tune", "patch"): _tune,
}
FORCE = {("report", "out"), ("results export", "out"), ("tune", "patch")}  # salvage writes only a new file


def _targets(tmp_path, store):
    """Every kind of thing an output's name can reach, made once: name -> (path, refused-with)."""
    side = tmp_path / "side"
    side.mkdir()
    (side / "hard.sqlite").hardlink_to(store)
    (side / "link.sqlite").symlink_to(store)
    (tmp_path / "spelling").symlink_to(store.parent)  # another spelling of the store's folder
    rescue = store.with_name(store.name + ".unsaved-20261127T000000Z-1.json")
    rescue.write_text(
        json.dumps({"gpuscout_version": "0.1.0", "schema_version": 2, "rescued_from": str(store), "runs": []}, indent=2)
    )
    moved = side / "kept-rescue.json"
    moved.write_text(rescue.read_text())
    foreign = side / "notes.txt"
    foreign.write_text("mine\n")
    other_db = side / "other.sqlite"
    other_db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    fifo = side / "fifo"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(side / "sock"))
    os.mknod(side / "random-node", stat.S_IFCHR | 0o666, os.makedev(1, 8))  # /dev/random's numbers
    folder = side / "folder"
    folder.mkdir()
    holder = subprocess.Popen(["sleep", "300"], stdout=open(foreign, "a"))  # its fd 1 is our foreign file
    store_itself = "is the results store itself"
    targets = {
        "the store": (store, store_itself),
        "a hard link to the store": (side / "hard.sqlite", store_itself),
        "a symlink to the store": (side / "link.sqlite", store_itself),
        "its WAL's name through another spelling": (tmp_path / "spelling" / f"{store.name}-wal", store_itself),
        "its rescue file by name": (rescue, store_itself),
        "a rescue file by content": (moved, "is a rescue file"),
        "a device node": (side / "random-node", None),
        "a socket": (side / "sock", None),
        "a folder": (folder, "folder"),
        "a name too long": (side / ("n" * 300), "longer than the 255 this file system allows"),
    }
    unforced = {  # refused without --force only
        "a foreign file": (foreign, "gpuscout did not write it"),
        "another SQLite file": (other_db, "is an SQLite database"),
        "a FIFO nobody reads": (fifo, None),
        "another process's descriptor": (Path(f"/proc/{holder.pid}/fd/1"), "gpuscout did not write it"),
    }
    return targets, unforced, (sock, holder)


def _fingerprint(path: Path):
    try:
        st = os.lstat(path)
    except OSError:  # absent, or a name too long to be
        return None
    if stat.S_ISREG(st.st_mode):
        return ("file", sha256(path), st.st_nlink)
    return (stat.S_IFMT(st.st_mode), os.readlink(path) if stat.S_ISLNK(st.st_mode) else None)


def test_every_output_refuses_what_it_must_never_write(store, tmp_path):
    targets, unforced, (sock, holder) = _targets(tmp_path, store)
    try:
        before = {p: _fingerprint(p) for p, _ in [*targets.values(), *unforced.values()] if "proc" not in str(p)}
        cases, expect = [], []
        for key, argv in OUTPUTS.items():
            for name, (path, fragment) in {**targets, **unforced}.items():
                cases.append(argv(path, store))
                if key not in FORCE and fragment in (None, "gpuscout did not write it", "is an SQLite database"):
                    fragment = "exists"  # salvage writes only a new file: whatever is there is refused as such
                expect.append((key, name, fragment))
            if key in FORCE:  # --force replaces the user's own files, never these
                for name, (path, fragment) in targets.items():
                    cases.append(argv(path, store, "--force"))
                    expect.append((key, f"{name} with --force", fragment))
        results = run_cases(cases, tmp_path)
        for result, (key, name, fragment) in zip(results, expect):
            try:
                refused(result, fragment or "")
            except AssertionError as exc:
                raise AssertionError(f"{' '.join(key)} onto {name}: {result['stderr'][-600:]}") from exc
        assert _fingerprint(store) == before[store]
        assert {p: _fingerprint(p) for p in before} == before  # every file outside the output as it was
        assert not list(tmp_path.rglob(".*.partial"))
    finally:
        holder.kill()
        sock.close()


def test_every_output_writes_streams_its_own_files_and_names_that_fit(store, tmp_path):
    """What each output may write, it writes: a name of 250 bytes (its temporary name cut to fit),
    its own earlier file again without --force, a foreign file with --force, the target of a
    symlink the user named (the link kept), /dev/null and standard output as streams; and when
    standard output is the store (`1<>`, `>>`), every command refuses before writing a byte."""
    long_name = tmp_path / ("r" * 245 + ".json")
    mine, foreign, target = tmp_path / "mine.html", tmp_path / "foreign.html", tmp_path / "target.html"
    foreign.write_text("<p>mine</p>")
    (tmp_path / "via-link.html").symlink_to(target)
    (tmp_path / "x.py").write_text(SCRIPT)  # what tune's dry run would tune
    cases = [
        OUTPUTS[("results export", "out")](long_name, store),
        OUTPUTS[("report", "out")](mine, store),
        OUTPUTS[("report", "out")](mine, store),  # its own file, again
        OUTPUTS[("report", "out")](foreign, store, "--force"),
        OUTPUTS[("report", "out")](tmp_path / "via-link.html", store),
        OUTPUTS[("report", "out")](Path("/dev/null"), store),
        OUTPUTS[("results export", "out")](Path("-"), store),
        OUTPUTS[("results salvage", "out")](tmp_path / ("s" * 247), store),  # room for SQLite's -journal
        _tune(tmp_path / ("p" * 250), store),
    ]
    results = run_cases(cases, tmp_path)
    for result in results:
        assert result["code"] == 0, (result["args"][:3], result["stderr"][-600:])
    assert json.loads(long_name.read_text())["runs"] and (tmp_path / ("s" * 247)).stat().st_size > 0
    assert "<!doctype html>" in foreign.read_text() and "<!doctype html>" in target.read_text()
    assert (tmp_path / "via-link.html").is_symlink() and len(json.loads(results[6]["stdout"])["runs"]) == 2
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not list(tmp_path.rglob(".*.partial"))
    # standard output onto the store: refused by every command, said on standard error
    before = sha256(store)
    onto = [
        {"args": ["results", "export", "--store", str(store)], "stdout_file": [str(store), "r+b"]},
        {"args": ["results", "export", "-o", "-", "--store", str(store)], "stdout_file": [str(store), "ab"]},
        {"args": ["results", "list", "--store", str(store)], "stdout_file": [str(store), "r+b"]},
        {"args": ["catalog"], "stdout_file": [str(store), "ab"]},  # any SQLite file, whatever --store says
        {"args": ["--help"], "stdout_file": [str(store), "ab"]},
    ]
    onto += [
        {"args": argv(Path("-"), store), "stdout_file": [str(store), mode]}  # every output given as `-`
        for argv in OUTPUTS.values()
        for mode in ("r+b", "ab")
    ]
    for result in run_cases(onto, tmp_path):
        refused(result, "standard output is")
    assert sha256(store) == before


def test_a_patch_target_where_no_write_succeeds_is_refused_before_the_session(store, tmp_path):
    """`tune --patch /dev/full` ran the whole session (75-93 s) and then lost the diff (issue 79,
    item 4): a target where every write fails (/dev/full, by its numbers) is one line, exit 2, before
    the script starts; /dev/null, a stream that takes what it is given, is still written."""
    (tmp_path / "x.py").write_text(SCRIPT)
    full, null = run_cases([_tune(Path("/dev/full"), store), _tune(Path("/dev/null"), store)], tmp_path)
    refused(full, "every write there fails")
    assert null["code"] == 0, null["stderr"][-600:]


def test_a_store_named_through_a_symlink_keeps_the_side_files_of_the_one_it_reaches(store, tmp_path):
    """`--store elsewhere/s.sqlite` (a symlink to the store): the names SQLite keeps beside the real
    file (its -wal, -shm, -journal) are the store's too, with --force as without (issue 79, item 5:
    `results export -o REAL-wal --force` wrote an export there)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = elsewhere / "s.sqlite"
    link.symlink_to(store)
    before = sha256(store)
    sides = [store.with_name(store.name + suffix) for suffix in ("-wal", "-shm", "-journal")]
    present = {side for side in sides if side.exists()}
    cases = [
        argv(side, link, *(("--force",) if (key in FORCE) else ())) for side in sides for key, argv in OUTPUTS.items()
    ]
    for result in run_cases(cases, tmp_path):
        refused(result, "is the results store itself")
    assert sha256(store) == before and {side for side in sides if side.exists()} == present


def test_a_fifo_with_a_reader_gets_the_output_whole(store, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    done = run_cli(*OUTPUTS[("results export", "out")](fifo, store))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(reader.communicate(timeout=30)[0])["runs"]) == 2


BIND = """
import json, subprocess, sys
cases, out, source, mount = sys.argv[1:5]
subprocess.run(["mount", "--bind", source, mount], check=True)
done = subprocess.run([sys.executable, sys.argv[5], cases], capture_output=True, text=True)
open(out, "w").write(done.stdout)
"""


def test_every_output_refuses_the_store_through_a_bind_mount(store, tmp_path):
    """The same store, reached through another mount point of its folder: by its name, and by the
    name SQLite would take for its WAL (which does not exist: no identity to compare, its folder's)."""
    if subprocess.run(["which", "unshare"], capture_output=True).returncode:
        pytest.skip("needs util-linux's unshare to make a bind mount")
    mounted = tmp_path / "elsewhere"
    mounted.mkdir()
    for unshare in (["unshare", "-m"], ["unshare", "-rm"]):  # as root, else in a user namespace
        probe = subprocess.run(
            [*unshare, "mount", "--bind", str(store.parent), str(mounted)], capture_output=True, text=True
        )
        if probe.returncode == 0:
            break
    else:
        pytest.skip(f"no mount namespace for a bind mount here: {probe.stderr.strip()[-300:]}")
    cases = [
        {"args": argv(mounted / name, store, *(["--force"] if key in FORCE else []))}
        for key, argv in OUTPUTS.items()
        for name in (store.name, f"{store.name}-wal")
    ]
    listing, seen, script = tmp_path / "cases.json", tmp_path / "seen.jsonl", tmp_path / "bind.py"
    listing.write_text(json.dumps(cases))
    script.write_text(textwrap.dedent(BIND))
    before = sha256(store)
    proc = subprocess.run(
        [
            *unshare,
            PY,
            str(script),
            str(listing),
            str(seen),
            str(store.parent),
            str(mounted),
            str(FIXTURES / "cli_cases.py"),
        ],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(results) == len(cases)
    for result in results:
        refused(result, "is the results store itself")
    assert sha256(store) == before and not (store.parent / f"{store.name}-wal").exists()


def test_files_a_verb_makes_beside_its_output_go_through_the_same_door(store, tmp_path):
    """A Markdown report's plots folder and plots, a sweep's folder and the files in it, the folder
    of tune's session reports and of watch's traces: never through a link, never over the store or a
    file gpuscout did not write, never a traceback for a file where a folder should be."""
    foreign = tmp_path / "foreign.png"
    foreign.write_bytes(b"\x89PNG\r\n\x1a\nmine")
    report = tmp_path / "md" / "report.md"
    report.parent.mkdir()
    plots = report.parent / "report_files"
    cases, expect = [], []

    def case(argv, fragment, setup):
        cases.append((argv, setup))
        expect.append(fragment)

    md = ["report", "--markdown", "--out", str(report), "--store", str(store)]
    case(md, "is a symbolic link", lambda: plots.symlink_to(tmp_path))
    case(md, "not a folder", lambda: plots.write_text("x"))
    case(md, "is the results store itself", lambda: (plots.mkdir(), (plots / "throughput-0.png").symlink_to(store)))
    case(md, "hard link", lambda: (plots.mkdir(), (plots / "throughput-0.png").hardlink_to(foreign)))
    case(
        md,
        "gpuscout did not write it",
        lambda: (plots.mkdir(), (plots / "throughput-0.png").write_bytes(foreign.read_bytes())),
    )
    sweeps = store.parent / "sweeps"
    folder = sweeps / "drill"
    sweep_file = tmp_path / "drill.yaml"
    sweep_file.write_text("name: drill\ncommand: echo {a}\nreports: [x]\nmetric: {name: x}\nspace: {a: [1]}\n")
    sw = ["sweep", str(sweep_file), "--dry-run", "--cpu-slots", "1", "--store", str(store)]
    case(sw, "is a file, not a folder", lambda: sweeps.write_text("x"))
    case(sw, "is a FIFO", lambda: (sweeps.mkdir(), os.mkfifo(folder)))
    case(sw, "is a symbolic link", lambda: (sweeps.mkdir(), folder.symlink_to(tmp_path)))
    case(
        sw,
        "is the results store itself",
        lambda: (folder.mkdir(parents=True), (folder / "summary.json").symlink_to(store)),
    )
    case(sw, "is a FIFO", lambda: (folder.mkdir(parents=True), os.mkfifo(folder / "summary.json")))
    case(
        sw,
        "gpuscout did not write it",
        lambda: (folder.mkdir(parents=True), (folder / "summary.json").write_text('{"mine": 1}')),
    )
    case(
        sw, "hard link", lambda: (folder.mkdir(parents=True), (folder / "tensorboard-input.json").hardlink_to(foreign))
    )
    case(sw, "is a symbolic link", lambda: (folder.mkdir(parents=True), (folder / "study.journal").symlink_to(foreign)))
    case(  # the compilation cache every sweep of the store shares
        sw,
        "is a symbolic link",
        lambda: (folder.mkdir(parents=True), (folder.parent / ".xla-cache").symlink_to(tmp_path)),
    )
    case(
        sw,
        "a folder gpuscout did not write",
        lambda: (
            folder.mkdir(parents=True),
            (folder / "tensorboard").mkdir(),
            (folder / "tensorboard" / "my-run").mkdir(),
        ),
    )
    script = tmp_path / "x.py"
    script.write_text(SCRIPT)
    case(
        ["tune", "--store", str(store), "--", PY, str(script)],
        "not a folder",
        lambda: (store.parent / "tune").write_text("x"),
    )
    case(
        ["watch", "--trace-steps", "2:3", "--store", str(store), "--", PY, str(script)],
        "not a folder",
        lambda: (store.parent / "traces").write_text("x"),
    )
    before_store = sha256(store)
    for (argv, setup), fragment in zip(cases, expect):
        for leftover in (plots, sweeps, store.parent / "tune", store.parent / "traces"):
            _remove(leftover)
        setup()
        seen = {
            p: _fingerprint(p)
            for p in [foreign, *_all(plots), *_all(sweeps), store.parent / "tune", store.parent / "traces"]
        }
        (result,) = run_cases([argv], tmp_path)
        refused(result, fragment)
        assert {p: _fingerprint(p) for p in seen} == seen, argv
    assert sha256(store) == before_store


def _all(folder: Path) -> list[Path]:
    if not folder.is_dir() or folder.is_symlink():
        return [folder]
    return [folder, *folder.rglob("*")]


def _remove(path: Path) -> None:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        import shutil

        shutil.rmtree(path)


# How each read is reached, and what a file of its kind needs in its name (a model file ends .py)
INPUTS = {
    ("sweep", "path"): lambda p: ["sweep", str(p), "--dry-run", "--cpu-slots", "1"],
    ("results import", "path"): lambda p: ["results", "import", str(p)],
    ("catalog", "catalog_file"): lambda p: ["catalog", "--catalog", str(p)],
    ("recommend", "catalog_file"): lambda p: ["recommend", "--workload", "mlp", "--catalog", str(p)],
    ("doctor", "explain_input"): lambda p: ["doctor", "--explain", str(p)],
    ("bench", "model"): lambda p: ["bench", "--model", f"{p}:build", "--cpu"],
    ("tune", "model"): lambda p: ["tune", "--model", f"{p}:build", "--cpu"],
    ("recommend", "model"): lambda p: ["recommend", "--model", f"{p}:build"],
    ("tune", "pipeline"): lambda p: ["tune", "mlp", "--pipeline", f"{p}:make", "--cpu"],
    ("bench", "dataset"): lambda p: ["bench", "mlp", "--to-accuracy", "0.9", "--dataset", f"{p}.npz", "--cpu"],
}


def test_every_read_refuses_what_is_not_a_file_in_bounded_time(store, tmp_path):
    """A FIFO nobody writes to, a device, a socket, a folder, and a file far larger than any such
    file can be (sparse: its size says so before a byte is read): one line at once, for each."""
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    fifo, sock_path, folder, huge = (kinds / f"{n}.py" for n in ("fifo", "sock", "folder", "huge"))
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    folder.mkdir()
    with open(huge, "wb") as handle:
        handle.truncate(3 * 2**30)
    device = kinds / "zero.py"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
    cases, expect = [], []
    for key, argv in INPUTS.items():
        for path in (fifo, device, sock_path, folder, huge):
            if key == ("doctor", "explain_input") and path == huge:
                continue  # a log is read from its end: a huge one is explained, not refused (below)
            cases.append(argv(path) + ["--store", str(store)] * (key[0] in ("sweep", "results import")))
            expect.append((key, path.name))
    try:
        results = run_cases(cases, tmp_path)
    finally:
        sock.close()
    for result, (key, name) in zip(results, expect):
        try:
            refused(result, "")
        except AssertionError as exc:
            raise AssertionError(f"{' '.join(key)} reading {name}: {result['stderr'][-600:]}") from exc
    assert max(r["max_rss_mib"] for r in results) < 1024 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
