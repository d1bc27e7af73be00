"""Issue 63: runs in a real MLflow tracking server (SQLite backend, artifacts on disk), read back
through MLflow's own client: a watch whose script logs to MLflow itself, a tune session, a sweep,
a cell watched in a Jupyter kernel, runs already stored sent later; and a server that is down or
never answers costs one warning line, never the record."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.conftest import FIXTURES, run_cli
from tests.notebooks import execute, texts, write_notebook

pytestmark = pytest.mark.slow
PY = sys.executable
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "jax"}


def _train(mode: str) -> list[str]:
    """`-- python train.py MODE`: the watch tests' user script (cached: fast; slow: input-bound)."""
    return ["--", PY, str(FIXTURES / "watch" / "train.py"), mode]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` as a team runs it, on a port of its own; its URI."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    proc = subprocess.Popen(
        [
            *(str(Path(sys.executable).with_name("mlflow")),),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=open(folder / "server.log", "w"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{uri}/health", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        raise AssertionError((folder / "server.log").read_text()[-3000:])
    yield uri
    # killed, not asked to stop: its workers' graceful shutdown took 20 s of the suite (2026-12-02),
    # and nothing of the server's is read after the tests
    os.killpg(proc.pid, 9)
    proc.wait(30)


def _client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _runs(uri: str, experiment: str) -> list:
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id], max_results=500)


def _artifacts(uri: str, run_id: str) -> set[str]:
    return {a.path for a in _client(uri).list_artifacts(run_id, "gpuscout")}


def test_a_watch_a_tune_session_and_a_sweep_in_mlflow(server, tmp_path):
    store = tmp_path / "results.sqlite"
    env = {**QUIET, "MLFLOW_TRACKING_URI": server}
    # 1. a script that autologs: `--mlflow` alone (MLflow's own MLFLOW_TRACKING_URI) adds
    # gpuscout's figures to the script's run, and ends that run, which --steps left running
    done = run_cli(
        "watch",
        "--mlflow",
        "--steps",
        "60",
        "--store",
        str(store),
        "--",
        PY,
        str(FIXTURES / "watch" / "tracked.py"),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (own,) = _runs(server, "users-own")
    assert f"added to your script's own MLflow run {own.info.run_id}" in done.stderr
    assert _runs(server, "gpuscout") == []  # no second run
    with Store(store) as opened:
        (record,) = opened.list(kind="watch")
        (link,) = opened.tracked(record.id)
    assert (link.tracker_run_id, link.origin, link.tracking_uri) == (own.info.run_id, "script", server)
    metrics, params = own.data.metrics, own.data.params
    assert metrics["gpuscout/samples_per_s"] == pytest.approx(record.samples_per_s)
    assert metrics["gpuscout/step_time_s"] == pytest.approx(record.step_time_s)
    assert metrics["gpuscout/input_wait_share"] == pytest.approx(record.input_wait_share)
    assert "loss" in metrics and params["gpuscout.batch_size"] == "64"  # autolog's own beside ours
    assert own.data.tags["gpuscout.run_id"] == record.id and own.info.status == "FINISHED"
    assert _artifacts(server, own.info.run_id) == {
        "gpuscout/verdict.txt",
        "gpuscout/report.html",
        "gpuscout/record.json",
    }
    # its epochs (or windows), then the run's figure last: the run table's value is the figure (issue 78)
    history = _client(server).get_metric_history(own.info.run_id, "gpuscout/samples_per_s")
    steps = [m.value for m in sorted(history, key=lambda m: m.step)]
    by_epochs = [e.samples_per_s for e in record.clock.steady] if record.clock else record.window_rates()
    assert steps == pytest.approx([*by_epochs, record.samples_per_s])
    history = _client(server).get_metric_history(own.info.run_id, "gpuscout/windows_samples_per_s")
    steps = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert steps == pytest.approx([*record.window_rates(), record.windows_samples_per_s])
    shown = run_cli("results", "show", record.id, "--store", str(store))
    assert f"MLflow: your script's own run {own.info.run_id} at {server}" in shown.stdout

    # 2. a tune session: one parent run, a child run for each stored run of it
    done = run_cli(
        "tune",
        "--json",
        "--mlflow",
        server,
        "--experiment",
        "tuned",
        "--only",
        "cache",
        "--steps",
        "40",
        "--store",
        str(store),
        *_train("slow"),
        env=QUIET,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # MLflow's own "View run" lines kept off --json's stdout
    runs = _runs(server, "tuned")
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["gpuscout.run_id"] for r in children) == sorted(set(report["run_ids"]))
    assert parent.data.tags["gpuscout.session"] == report["session"]
    assert parent.data.metrics["gpuscout/baseline_samples_per_s"] == pytest.approx(report["baseline"]["samples_per_s"])
    assert {"gpuscout/tune.json", "gpuscout/tune.txt"} <= _artifacts(server, parent.info.run_id)
    best = report["best"]
    if best is not None and best.get("ratio") is not None:  # the session's one figure: its confirmation's
        assert parent.data.metrics["gpuscout/speedup"] == pytest.approx(best["ratio"])
        assert parent.data.metrics["gpuscout/speedup_ci95_low"] == pytest.approx(best["ratio_low"])
        assert parent.data.params["gpuscout.confirmation"] == best["confirmation"]
    with Store(store) as opened:  # the session's own link, beside each run's
        assert [link.tracker_run_id for link in opened.tracked(f"session:{report['session']}")] == [parent.info.run_id]

    # 3. a sweep: a parent, a child run per trial with its hyperparameters and its reports over
    # the epochs; resumed, nothing is logged twice
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(
        f"name: tracked-grid\ncommand: {PY} {FIXTURES / 'sweeps' / 'train_tiny.py'} --lr {{lr}} --units 8 --epochs 3\n"
        "reports: [val_accuracy]\nmetric: {name: val_accuracy, direction: max}\nspace:\n  lr: [0.01, 0.1]\n"
        "strategy: {kind: grid}\ntimeout_s: 300\n"
    )
    args = ["sweep", str(sweep), "--cpu-slots", "2", "--mlflow", server, "--experiment", "swept", "--store", str(store)]
    done = run_cli(*args, env=QUIET)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = _runs(server, "swept")
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    trials = sorted((r for r in runs if r is not parent), key=lambda r: r.data.params["lr"])
    assert [r.data.params["lr"] for r in trials] == ["0.01", "0.1"]
    with Store(store) as opened:
        stored = {t["params"]["lr"]: t["result"] for t in (t.model_dump() for t in opened.trials("tracked-grid"))}
    for trial in trials:
        result = stored[float(trial.data.params["lr"])]
        curve = _client(server).get_metric_history(trial.info.run_id, "val_accuracy")
        assert [m.value for m in sorted(curve, key=lambda m: m.step)] == pytest.approx(
            [h["val_accuracy"] for h in result["history"]]
        )
        assert trial.data.metrics["val_accuracy"] == pytest.approx(result["metrics"]["val_accuracy"])
    best = max(r["metrics"]["val_accuracy"] for r in stored.values())
    assert parent.data.metrics["gpuscout/best_val_accuracy"] == pytest.approx(best)
    again = run_cli(*args[:2], "--resume", *args[2:], env=QUIET)
    assert again.returncode == 0 and f"is in run {parent.info.run_id} already" in again.stderr
    assert len(_runs(server, "swept")) == 3

    # 4. a cell watched in a live Jupyter kernel, `%%gpuscout watch --mlflow URI`: its record logged
    # as a script's is; `--mlflow` alone without MLFLOW_TRACKING_URI is one line, before the cell runs
    fit = (
        "import numpy as np, keras\nmodel = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\n"
        "model.compile('sgd', 'mse')\n"
        "model.fit(np.ones((2048, 8), 'float32'), np.ones((2048, 1), 'float32'), epochs=3, batch_size=32, verbose=0)"
    )
    notebook = write_notebook(
        tmp_path / "tracked.ipynb",
        [
            "%load_ext gpuscout",
            f"%%gpuscout watch --label in-a-cell --mlflow {server} --experiment cells\n{fit}",
            "%%gpuscout watch --mlflow\nprint('the cell ran')",
        ],
    )
    outputs = execute(notebook, {**QUIET, "GPUSCOUT_STORE": str(store), "MLFLOW_TRACKING_URI": ""})
    with Store(store) as opened:
        (cell,) = [r for r in opened.list(kind="watch") if r.workload == "in-a-cell"]
        (link,) = opened.tracked(cell.id)
    (logged,) = _runs(server, "cells")
    assert (link.tracker_run_id, logged.data.tags["gpuscout.run_id"]) == (logged.info.run_id, cell.id)
    assert logged.data.metrics["gpuscout/samples_per_s"] == pytest.approx(cell.samples_per_s)
    assert "gpuscout/verdict.txt" in _artifacts(server, logged.info.run_id)
    refused = texts(outputs[2])
    assert "UsageError" in refused and "MLFLOW_TRACKING_URI is not set" in refused and "the cell ran" not in refused


def test_a_server_down_or_silent_costs_a_warning_and_runs_are_sent_later(server, tmp_path):
    """The watch is stored and exits as its script did with the server down; `results export
    --mlflow` sends it later, its figures those of the record; a server that never answers is
    given up after the user's own MLFLOW_HTTP_REQUEST_TIMEOUT."""
    store = tmp_path / "results.sqlite"
    down = f"http://127.0.0.1:{_free_port()}"
    done = run_cli(
        "watch",
        "--mlflow",
        down,
        "--steps",
        "40",
        "--store",
        str(store),
        *_train("cached"),
        env=QUIET,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert f"MLflow at {down} did not take the runs" in warning and "all the same" in warning
    with Store(store) as opened:
        (record,) = opened.list(kind="watch")
        assert opened.tracked(record.id) == []
    sent = run_cli(
        "results", "export", "--mlflow", server, "--experiment", "later", record.id[:6], "--store", str(store)
    )
    assert sent.returncode == 0, sent.stderr
    (run,) = _runs(server, "later")
    assert run.data.tags["gpuscout.run_id"] == record.id and run.data.params["gpuscout.command"].endswith("cached")
    assert run.data.metrics["gpuscout/samples_per_s"] == pytest.approx(record.samples_per_s)
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        slow = run_cli(
            "results",
            "export",
            "--mlflow",
            f"http://127.0.0.1:{silent.getsockname()[1]}",
            record.id,
            "--store",
            str(store),
            env={"MLFLOW_HTTP_REQUEST_TIMEOUT": "1", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
        )
    assert slow.returncode == 1 and "did not take the runs" in slow.stderr and time.monotonic() - started < 30
    with Store(store) as opened:
        assert [link.tracking_uri for link in opened.tracked(record.id)] == [server]
    # bad input: exit 2 before anything runs
    nothing = run_cli("watch", "--mlflow", "--store", str(store), "--", PY, "x.py", env={"MLFLOW_TRACKING_URI": ""})
    assert nothing.returncode == 2 and "MLFLOW_TRACKING_URI is not set" in nothing.stderr
