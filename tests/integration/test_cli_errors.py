"""Bad input: exit 2, one clear line, nothing run, nothing stored changed."""

import hashlib
import json
import sqlite3
import sys

import pytest

from gpuscout.store.schema import APPLICATION_ID
from tests.cli_checks import one_error_line
from tests.conftest import run_cli


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["resnet5"], "unknown workload 'resnet5': did you mean resnet50"),
        (["mlp", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["mlp", "--precision", "fp16"], "unknown precision 'fp16'"),
        (["mlp", "--backend", "torch"], "unknown backend 'torch'"),
        (["mlp", "--gpu", "0"], "NVML found no GPU"),
        (["mlp", "--backend", "jax", "--no-xla"], "always compiles with XLA"),
        ([], "name at least one workload"),
        (["resnet50", "--suite", "quick"], "name workloads or a --suite, not both"),
        (["--suite", "fast"], "unknown suite 'fast': choose quick, standard"),
        (["resnet50", "--seq-len", "64"], "--seq-len applies to token workloads only, not resnet50"),
        (["gpt2_small", "--seq-len", "2048"], "--seq-len 2048 is outside 1..1024 for gpt2_small"),
    ],
)
def test_bad_bench_input(store_path, args, fragment):
    one_error_line(run_cli("bench", *args, "--store", str(store_path)), fragment)
    assert not store_path.exists()  # validation happens before the store is even opened


def test_corrupt_store_is_refused_and_untouched(store_path):
    store_path.write_bytes(b"garbage" * 1000)
    before = hashlib.sha256(store_path.read_bytes()).hexdigest()
    one_error_line(run_cli("bench", "mlp", "--cpu", "--store", str(store_path)), "not a usable gpuscout results store")
    assert hashlib.sha256(store_path.read_bytes()).hexdigest() == before


def test_newer_store_is_refused(store_path):
    db = sqlite3.connect(store_path)
    db.execute("CREATE TABLE runs (id)")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    one_error_line(
        run_cli("results", "list", "--store", str(store_path)), "written by a newer gpuscout (store schema 7)"
    )


def test_results_errors(store_path):
    one_error_line(run_cli("results", "list", "--store", str(store_path)), "no results store")
    one_error_line(
        run_cli("results", "export", "--format", "xml", "--store", str(store_path)), "unknown --format 'xml'"
    )


def test_help_lists_verbs_in_workflow_order_and_version():
    result = run_cli("--help")
    assert result.returncode == 0
    commands = result.stdout[result.stdout.index("Commands") :]
    positions = [commands.index(f" {verb} ") for verb in ("doctor", "bench", "results")]
    assert positions == sorted(positions)
    assert run_cli("--version").stdout.strip() == "gpuscout 0.1.0"
    assert "Examples" in run_cli("bench", "--help").stdout


def test_brackets_in_messages_survive_rich_markup(store_path, monkeypatch):
    """An install hint such as 'gpuscout[tensorflow]' must not be eaten as a markup tag."""
    from typer.testing import CliRunner

    from gpuscout.cli import app
    from gpuscout.core import backends
    from gpuscout.core.spec import Backend

    monkeypatch.setattr(backends, "is_installed", lambda b: b is Backend.jax)
    result = CliRunner().invoke(app, ["bench", "mlp", "--backend", "tensorflow", "--store", str(store_path)])
    assert result.exit_code == 2
    assert "pip install 'gpuscout[tensorflow]'" in result.output


def test_a_sweep_file_that_cannot_run_is_refused_before_the_store_or_a_trial(tmp_path, store_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n" + bytes(range(256)))
    one_error_line(
        run_cli("sweep", str(binary), "--cpu-slots", "1", "--store", str(store_path)),
        "is not a text file (it holds NUL bytes): not a sweep file",
    )
    template = tmp_path / "template.yaml"  # trial 0 cannot make its command: {x:d} given 0.5
    template.write_text(
        'name: t\ncommand: python -c \'open("ran", "w")\' {x:d}\nreports: [m]\nmetric: {name: m}\n'
        "space:\n  x: [1, 0.5]\n"
    )
    one_error_line(
        run_cli("sweep", str(template), "--cpu-slots", "1", "--store", str(store_path)),
        "command cannot be made for trial 1 {\"x\": 0.5}: Unknown format code 'd'",
    )
    assert not store_path.exists() and not (tmp_path / "ran").exists()


def test_small_things_a_new_user_trips_over(tmp_path, store_path):
    # scale with no GPU and no --cpu: exit 2, never a silent run on logical CPU devices
    one_error_line(run_cli("scale", "mlp", "--gpu-counts", "1,2", "--store", str(store_path)), "no NVIDIA GPU found")
    # tune's bad budget: the one line, with nothing printed before it
    budget = run_cli("tune", "mlp", "--cpu", "--budget-minutes", "0", "--store", str(store_path))
    one_error_line(budget, "--budget-minutes must be > 0")
    assert budget.stderr.startswith("error:") and budget.stdout == ""
    one_error_line(
        run_cli("recommend", "--workload", "resnet50", "--epochs", "-3"),
        "--epochs takes a finite number from 0 to 9,007,199,254,740,992, got -3.0",
    )
    assert not store_path.exists()
    # a sweep file without name: is named after the file
    sweep = tmp_path / "lr-search.yaml"
    sweep.write_text(
        f"command: {sys.executable} -c 'print(1)' {{x}}\nreports: [m]\nmetric: {{name: m}}\nspace:\n  x: [1, 2]\n"
    )
    dry = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--dry-run", "--store", str(store_path))
    assert dry.returncode == 0 and "sweep lr-search: 2 trials" in dry.stdout, dry.stderr
    # --dry-run tells the early-stopping plan (issue 78): the rule, and each rung's count, in text and JSON
    halving = tmp_path / "halving.yaml"
    halving.write_text(
        f"command: {sys.executable} -c 'print(1)' {{x}}\nreports: [m]\nmetric: {{name: m}}\n"
        "space:\n  x: [1, 2, 3, 4, 5, 6, 7, 8, 9]\nearly_stop: {kind: successive_halving}\n"
    )
    dry = run_cli("sweep", str(halving), "--cpu-slots", "1", "--dry-run", "--store", str(store_path))
    assert "early stopping (successive_halving): at each rung the best 1 in 3" in dry.stdout, dry.stderr
    assert "  epoch 1: 9 trials reach it, the best 3 go on" in dry.stdout
    dry = run_cli("sweep", str(halving), "--cpu-slots", "1", "--dry-run", "--json", "--store", str(store_path))
    rungs = json.loads(dry.stdout)["early_stopping"]["rungs"]
    assert [(r["epoch"], r["reach"], r["go_on"]) for r in rungs] == [(1, 9, 3), (3, 3, 1), (9, 1, 1)]
    assert "--install-completion" in run_cli("--help").stdout
