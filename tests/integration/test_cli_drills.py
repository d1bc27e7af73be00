"""Issue 44's drills, as an adversarial user would run them, through the real CLI: nothing outside
the output is ever written (the store by any path, a device, a FIFO, a folder a sweep's name
points at), nothing reads without bound (alias bombs, huge strings and integers, duplicate keys),
and every refusal is one line with exit 2 that leaves the store's bytes as they were.

Refusals run in one interpreter (tests/fixtures/cli_cases.py: `main(args)` as the `gpuscout`
command runs it), a fraction of a second each, so that a hundred drills cost one start-up."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from gpuscout.tune.changes import CHANGES
from tests.cli_checks import refused, run_cases, sha256
from tests.conftest import FIXTURES, SRC, run_cli
from tests.records import make_record

PY = sys.executable


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "results.sqlite"
    from gpuscout.store import Store

    with Store(path) as s:
        s.put_many([make_record("run00001"), make_record("run00002", median=120.0)])
    return path


def test_outputs_go_to_files_and_streams_never_over_the_store_or_a_device(store, tmp_path):
    """Item 1: the store reached by another path (a hard link, a symlink, /dev/stdout, its WAL's
    name) is refused with --force; a device is never replaced by a file; /dev/null and a FIFO
    with a reader are written as streams, a FIFO without one is refused at once."""
    before = sha256(store)
    (tmp_path / "hard.sqlite").hardlink_to(store)
    (tmp_path / "link.html").symlink_to(store)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    mine = tmp_path / "mine.html"
    mine.write_text("<p>mine</p>")
    (tmp_path / "via-link.html").symlink_to(tmp_path / "target.html")
    store_arg = ["--store", str(store)]
    cases = [
        (["report", "--out", str(tmp_path / "hard.sqlite"), "--force"], "is the results store itself"),
        (["results", "export", "-o", str(tmp_path / "link.html"), "--force"], "is the results store itself"),
        (["results", "export", "-o", f"{store}-wal", "--force"], "is the results store itself"),
        (["report", "--out", str(fifo)], "is a FIFO that nothing reads"),
        (["report", "--out", str(tmp_path / "sock"), "--force"], "is a socket, not a file"),
        (["report", "--out", "/dev/random", "--force"], "is a character device, not a file"),
        (["report", "--out", "/dev/full"], "cannot write /dev/full: No space left on device"),
        (["report", "--markdown", "--out", "/dev/null"], "a Markdown report writes its plots beside it"),
        (["report", "--out", str(tmp_path)], "is a folder"),
        (["report", "--out", str(mine)], "gpuscout did not write it"),
    ]
    try:  # device nodes of our own (root can make them; writing to either would be harmless)
        os.mknod(tmp_path / "random-node", stat.S_IFCHR | 0o666, os.makedev(1, 8))  # /dev/random's numbers
        os.mknod(tmp_path / "block-node", stat.S_IFBLK | 0o666, os.makedev(7, 255))  # a loop device's
        cases += [
            (["report", "--out", str(tmp_path / "random-node"), "--force"], "is a character device, not a file"),
            (["results", "export", "-o", str(tmp_path / "block-node"), "--force"], "is a block device, not a file"),
        ]
    except PermissionError:
        print("not root: no device nodes of our own; /dev/random and /dev/full stand for them")
    written = [["report", "--out", "/dev/null", "--force"], ["report", "--out", str(tmp_path / "via-link.html")]]
    results = run_cases([args + store_arg for args, _ in cases] + [args + store_arg for args in written], tmp_path)
    for result, (_, fragment) in zip(results, cases):
        refused(result, fragment)
    for result in results[len(cases) :]:
        assert result["code"] == 0, result
    exported = run_cli("results", "export", "-o", "-", "--store", str(store))  # `-o -`: stdout, written in place
    assert exported.returncode == 0 and len(json.loads(exported.stdout)["runs"]) == 2, exported.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert (tmp_path / "via-link.html").is_symlink() and "<!doctype html>" in (tmp_path / "target.html").read_text()
    assert stat.S_ISFIFO(fifo.stat().st_mode) and mine.read_text() == "<p>mine</p>"
    assert all(
        not p.exists() or stat.S_ISCHR(p.stat().st_mode) or stat.S_ISBLK(p.stat().st_mode)
        for p in (tmp_path / "random-node", tmp_path / "block-node")
    )
    assert sha256(store) == before and not list(tmp_path.glob(".*.partial"))
    # a FIFO with a reader is a stream: the report arrives whole
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    done = run_cli("report", "--out", str(fifo), "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert b"<!doctype html>" in reader.communicate(timeout=30)[0]
    sock.close()


def _sweep_file(path, name: str, space: str = "{a: [1]}") -> str:
    path.write_text(
        f"name: {json.dumps(name)}\ncommand: echo {{a}}\nreports: [x]\nmetric: {{name: x}}\nspace: {space}\n"
    )
    return str(path)


BOMB = "space:\n  a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)


def test_files_that_expand_repeat_or_overflow_are_refused_in_bounded_time_and_memory(store, tmp_path):
    """Item 3, and item 4's duplicate keys: a 607-byte alias bomb, a value that holds itself, a
    key given twice (YAML and JSON), integers of 5,000 digits, Infinity, a 20 MiB name, a
    negative throughput; and sweep names that would leave the sweeps' folder."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("name: bomb\ncommand: echo {a}\nreports: [x]\nmetric: {name: x}\n" + BOMB)
    loop = tmp_path / "loop.yaml"
    loop.write_text("name: loop\ncommand: echo {a}\nreports: [x]\nmetric: {name: x}\nspace: {a: &x [1, *x]}\n")
    twice = tmp_path / "twice.yaml"
    twice.write_text(_sweep_file(tmp_path / "t.yaml", "ok") and (tmp_path / "t.yaml").read_text() + "name: other\n")
    digits = tmp_path / "digits.yaml"
    _sweep_file(digits, "digits", "{a: {int: [0, " + "9" * 5000 + "]}}")
    exported = json.loads(run_cli("results", "export", "--store", str(store)).stdout)
    text = json.dumps(exported, indent=2)
    docs = {
        "dup": text.replace('"workload": "mlp"', '"workload": "mlp", "workload": "x"', 1),
        "digits": text.replace('"batch_size": 64', '"batch_size": ' + "9" * 5000, 1),
        "inf": text.replace('"duration_s": 10.0', '"duration_s": Infinity', 1),
        "huge": text.replace('"duration_s": 10.0', '"duration_s": 1e999', 1),
        "name": json.dumps({**exported, "runs": [{**exported["runs"][0], "id": "big", "workload": "w" * 20 * 2**20}]}),
        "negative": json.dumps({**exported, "runs": [{**exported["runs"][0], "id": "neg", "samples_per_s": -5.0}]}),
    }
    for name, doc in docs.items():
        (tmp_path / f"{name}.json").write_text(doc)
    catalog = tmp_path / "prices.toml"  # TOML has inf: a price of inf would rank nothing
    catalog.write_text(
        '[[price]]\ngpu = "h100_sxm"\nkind = "cloud"\nprovider = "x"\nusd_per_hour = inf\n'
        'date = "2026-11-01"\nsource = "mine"\n'
    )
    cases = [
        (["sweep", str(bomb), "--dry-run", "--cpu-slots", "1"], "expands to more than 100,000 values"),
        (["sweep", str(loop), "--dry-run", "--cpu-slots", "1"], "a value that contains itself"),
        (["sweep", str(twice), "--dry-run", "--cpu-slots", "1"], "the key 'name' is given twice"),
        (["sweep", str(digits), "--dry-run", "--cpu-slots", "1"], "an integer of thousands of digits"),
        (["results", "import", str(tmp_path / "dup.json")], "the key 'workload' is given twice"),
        (["results", "import", str(tmp_path / "digits.json")], "(5000 digits) is larger than any figure"),
        # Infinity is read (an export keeps a diverged loss so) and refused where the record keeps no reading
        (["results", "import", str(tmp_path / "inf.json")], "duration_s: Input should be a finite number"),
        (["results", "import", str(tmp_path / "huge.json")], "the number 1e999 is too large"),
        (["results", "import", str(tmp_path / "name.json")], "holds a string of 20,971,520 characters"),
        (["results", "import", str(tmp_path / "negative.json")], "samples_per_s: Input should be greater than or"),
        (["catalog", "--catalog", str(catalog)], "holds inf, not a finite number: not a catalog"),
    ] + [
        (
            ["sweep", _sweep_file(tmp_path / f"n{i}.yaml", name), "--dry-run", "--cpu-slots", "1"],
            "cannot name a sweep: its logs go in a folder of that name",
        )
        for i, name in enumerate(["..", ".", ".hidden", "a/b", "x" * 101])
    ]
    before = sha256(store)
    results = run_cases(
        [args + (["--store", str(store)] if args[0] != "catalog" else []) for args, _ in cases], tmp_path
    )
    for result, (_, fragment) in zip(results, cases):
        refused(result, fragment)
    assert max(r["max_rss_mib"] for r in results) < 1024  # the bomb expanded would be gigabytes
    assert sha256(store) == before
    assert not (tmp_path / "summary.json").exists() and not (tmp_path / "sweeps").exists()


def test_the_options_that_cannot_mean_anything_are_refused_one_line_each(store, tmp_path):
    """Item 4: empty text, lists that name nothing or a thing twice, zero and astronomic counts,
    options for another mode, click's own errors (once a box of five lines), a script that is
    missing, a folder or a binary; each one line, exit 2, nothing run or stored."""
    script = tmp_path / "x.py"
    script.write_text("print('hi')\n")
    (tmp_path / "bin.py").write_bytes(b"\x7fELF\x00\x00")
    sweep = _sweep_file(tmp_path / "ok.yaml", "ok")
    from gpuscout.record.document import json_document

    side = tmp_path / "side.json"  # an export of one run, named twice: a run is one side's
    side.write_text(json_document([make_record("run00009")]))
    cases = [
        (["compare", str(side), str(side), "--fail-slower", "5"], "run run00009 is in both"),
        (["compare", str(side), "run00001"], "name two export files (BASE.json NEW.json) or run ids, not both"),
        (["compare", str(side), str(side), "--by", "gpu"], "side against side: leave out --by"),
        (["results", "export", "--mlflow", "http://h:5000", "-o", str(tmp_path / "x.json")], "leave out --format"),
        (["results", "export", "run00001", "--workload", "mlp"], "name runs or filter them"),
        (["watch", "--experiment", "x", "--", PY, str(script)], "--experiment names an MLflow experiment"),
        (["tune", "--only", "", "--dry-run", "--", PY, str(script)], "--only is empty"),
        (["tune", "--only", ",", "--dry-run", "--", PY, str(script)], "--only ',' names nothing"),
        (["tune", "--skip", "cache,cache", "--dry-run", "--", PY, str(script)], "--skip lists cache twice"),
        # issue 87, item 5: a 26 s baseline ran and was stored before this refusal
        (["tune", "--skip", ",".join(CHANGES), "--", PY, str(script)], "--skip leaves no change to try (it names all"),
        (["tune", "--steps", "100000000000000000000", "--", PY, str(script)], "--steps takes a finite number from 0"),
        (["tune", "--", PY, str(tmp_path / "missing.py")], "missing.py: no such file"),
        (["tune", "--", PY, str(tmp_path)], "is a folder without a __main__.py"),
        (["watch", "--", PY, str(tmp_path / "bin.py")], "is not a Python script (it holds NUL bytes"),
        (["watch", "--steps", "1" + "0" * 30, "--", PY, str(script)], "got a number of 31 digits"),
        (["bench", "mlp", "--cpu", "--timeout", "0"], "--timeout must be > 0, got '0'"),
        (["bench", "mlp", "--cpu", "--timeout", "5 min"], "--timeout must be a duration like 20s, 6m, 1.5h or 3d"),
        (["recommend", "--params", "1B", "--deadline", "20y"], "(a bare number is hours)"),
        (["tune", "--budget-minutes", "0.5", "--", PY, str(script)], "--budget-minutes 0.5 is too small"),
        (["bench", "mlp", "--cpu", "--seed", "5000000000"], "invalid seed"),
        (["bench", "mlp", "--cpu", "--input-shape", "0,0"], "describe your own --model"),
        (["bench", "mlp", "--cpu", "--mode", "inference", "--model-format", ","], "--model-format ',' names nothing"),
        (["bench", "mlp", "--cpu", "--model-format", "onnx"], "--model-format is the form an inference benchmark"),
        (
            ["bench", "mlp", "--cpu", "--mode", "inference", "--format", "keras", "--model-format", "onnx"],
            "give --model-format alone",
        ),
        (["compare", "--json", "--csv"], "choose one of --format, --json, --markdown and --csv"),
        (["report", "--format", "html", "--markdown"], "choose one of --format and --markdown"),
        (["bench", "mlp", "--cpu", "--mode", "inference", "--load-seconds", "0"], "--load-seconds must be > 0"),
        (["bench", "mlp", "--bogus"], "No such option: --bogus"),
        (["bench", "mlp", "--repeats", "x"], "Invalid value for '--repeats'"),
        (["nope"], "No such command 'nope'"),
        (["recommend", "--params", "1e30"], "is more than 1e+15 parameters"),
        (["compare", "--by", ""], "--by is empty"),
        (["catalog", ""], "GPU is empty"),
        (["results", "show", ""], "RUN_ID is empty"),
        (["results", "list", "--limit", "1" + "0" * 23], "--limit takes a finite number from 0"),
        (["scale", "mlp", "--cpu", "--gpu-counts", "1,1"], "--gpu-counts lists 1 twice"),
        (["sweep", sweep, "--gpus", ",", "--dry-run"], "--gpus ',' names nothing"),
        (["results", "list", "--store", str(tmp_path / "fifo")], "is a FIFO, not a results store"),
        (["results", "list", "--store", "/dev/null"], "is a device, not a results store"),
    ]
    os.mkfifo(tmp_path / "fifo")
    before = sha256(store)
    results = run_cases([args for args, _ in cases], tmp_path, env={"GPUSCOUT_STORE": str(store)})
    for result, (_, fragment) in zip(results, cases):
        refused(result, fragment)
    assert sha256(store) == before  # nothing stored by any of them


def test_recommend_from_a_failed_run_says_so_before_its_ranking(tmp_path):
    """Item 4: a watched run that failed after timing its steps (one of the H100 fixture's, its
    end changed) still predicts, and says first that the training was never seen to finish."""
    record = json.loads((FIXTURES / "recommend" / "h100_watch.json").read_text())["runs"][0]
    record.update(
        id="failed01",
        status="failed",
        exit_code=1,
        error={"message": "exited with code 1: CUDA error", "stderr_tail": "", "returncode": 1},
    )
    doc = tmp_path / "failed.json"
    doc.write_text(json.dumps({"gpuscout_version": "0.1.0", "schema_version": 2, "runs": [record]}))
    store = tmp_path / "s.sqlite"
    assert run_cli("results", "import", str(doc), "--store", str(store)).returncode == 0
    shown = run_cli("recommend", "--from", "failed01", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    steps = max(f["steps"] for f in record["fits"])
    assert shown.stderr.startswith(
        f"warning: run failed01 failed after {steps:,} training steps: exited with code 1: CUDA error"
    ), shown.stderr
    assert "has not been seen to finish" in shown.stderr
    assert json.loads(run_cli("recommend", "--from", "failed01", "--json", "--store", str(store)).stdout)["from"][
        "ended"
    ].startswith("run failed01 failed")


def test_issue_59s_bad_inputs_are_one_line_each_never_a_traceback_nor_taken_silently(store, tmp_path):
    """Item 6: the 31 inputs of issue 59's drills that were tracebacks or were taken silently, and
    their neighbours (tests/unit/test_parsers.py drives the same parsers with hypothesis)."""

    def sweep_file(name: str, body: str) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\nreports: [x]\nmetric: {{name: x}}\n{body}\n")
        return str(path)

    script = tmp_path / "x.py"
    script.write_text("print('hi')\n")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "log.sock"))
    exported = json.loads(run_cli("results", "export", "--store", str(store)).stdout)
    for name, change in (
        ("newer", {"schema_version": 999}),
        ("negative", {"batch_size": -1}),
        ("env-newer", {"env": {**exported["runs"][0]["env"], "schema_version": 999}}),
    ):
        doc = {**exported, "runs": [{**exported["runs"][0], "id": f"x{name}", **change}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    dry = ["--dry-run", "--cpu-slots", "1", "--store", str(store)]
    cases = [
        (["recommend", "--params", "1.2.3"], "--params must be a number like 350M or 1.3B, got '1.2.3'"),
        (["recommend", "--params", "."], "--params must be a number like 350M"),
        (
            ["recommend", "--workload", "resnet50", "--deadline", "1.2.3d"],
            "--deadline must be a duration like 20s, 6m, 1.5h or 3d",
        ),
        (["recommend", "--workload", "resnet50", "--deadline", "1" + "0" * 400 + "d"], "is more than 3650d"),
        (["recommend", "--params", "1B", "--layers", "0"], "--layers must be >= 1, got 0"),
        (["recommend", "--params", "1B", "--vocab", "0"], "--vocab must be >= 1, got 0"),
        (["results", "list", "--store", "s" * 5000], "cannot open the results store"),
        (
            [
                "sweep",
                sweep_file(
                    "seed", "command: echo {lr}\nspace: {lr: [1]}\nstrategy: {kind: random, trials: 2, seed: -1}"
                ),
                *dry,
            ],
            "strategy.seed: Input should be greater than or equal to 0",
        ),
        (["sweep", sweep_file("brace", "command: echo {lr\nspace: {lr: [1]}"), *dry], "command is not a template"),
        (
            ["sweep", sweep_file("binary", "command: echo {lr}\nspace: {lr: [!!binary aGVsbG8=]}"), *dry],
            "holds a bytes value",
        ),
        (["sweep", sweep_file("date", "command: echo {lr}\nspace: {lr: [2026-11-27]}"), *dry], "holds a date value"),
        (
            [
                "sweep",
                sweep_file(
                    "range",
                    "command: echo {lr}\nspace: {lr: {uniform: [0, true]}}\nstrategy: {kind: random, trials: 2}",
                ),
                *dry,
            ],
            "space.lr.uniform must be [low, high]",
        ),
        (
            ["sweep", sweep_file("retries", "command: echo {lr}\nspace: {lr: [1]}\nretries: true"), *dry],
            "retries: Input should be a valid integer",
        ),
        (
            [
                "sweep",
                sweep_file("port", "command: echo {lr}\nspace: {lr: [1]}"),
                "--executor",
                "ray",
                "--address",
                "ray://head:70000",
                *dry,
            ],
            "ports 1 to 65535",
        ),
        (["doctor", "--explain", str(tmp_path / "log.sock")], "a device or socket, not a log file"),
        (["watch", "--trace-steps", f"1:{2**53 + 1}", "--", PY, str(script)], "1 <= FIRST <= LAST <= 2^53"),
        (
            ["tune", "--only", "cache", "--skip", "cache", "--dry-run", "--", PY, str(script)],
            "--only and --skip both name cache",
        ),
        (["bench", "mlp", "--mode", "inference", "--batch-sizes", "1,,2", "--cpu"], "has an empty item"),
        (["scale", "mlp", "--hosts", "a:70000,b:2222"], "ports 1 to 65535"),
        (["bench", "--model", f"{script}:build", "--input-shape", "32,,3"], "has an empty item"),
        (["scale", "mlp", "--cpu", "--gpu-counts", "1", "--gpus", "0,,1"], "has an empty item"),
        (["results", "import", str(tmp_path / "newer.json")], "schema_version: Value error, schema 999 is newer"),
        (["results", "import", str(tmp_path / "env-newer.json")], "env.schema_version: Value error, schema 999"),
        (
            ["results", "import", str(tmp_path / "negative.json")],
            "run #1 (xnegative): batch_size: Input should be greater",
        ),
    ]
    before = sha256(store)
    try:
        results = run_cases([args for args, _ in cases], tmp_path, env={"GPUSCOUT_STORE": str(store)})
    finally:
        sock.close()
    for result, (_, fragment) in zip(results, cases):
        refused(result, fragment)
    assert sha256(store) == before


def test_explain_reads_a_log_without_bound_in_seconds_and_ends_on_a_stream_that_never_does(tmp_path):
    """Item 3: a 60 MiB line (once minutes, deaf to SIGTERM) and standard input that never ends
    (`yes |`): each answered at once, the log's end read, in bounded memory."""
    line = tmp_path / "one-line.log"
    with open(line, "w") as handle:
        handle.write("x" * (60 * 2**20) + "\nCannot dlopen some GPU libraries. Skipping registering GPU devices...\n")
    started = time.monotonic()
    done = run_cli("doctor", "--explain", str(line), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["recognised"] and "its last part was read" in done.stderr
    endless = subprocess.Popen(["yes", "loss: nan"], stdout=subprocess.PIPE)
    try:
        piped = subprocess.run(
            [PY, "-m", "gpuscout", "doctor", "--explain", "-", "--json"],
            stdin=endless.stdout,
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
        )
    finally:
        endless.kill()
    assert piped.returncode == 0 and json.loads(piped.stdout)["lines"] > 100_000, piped.stderr[-2000:]
    assert time.monotonic() - started < 90  # both, doctor's own checks of the machine included
