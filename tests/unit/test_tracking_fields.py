"""What a stored run says to MLflow (issue 63), checked against figures worked out by hand; and
`--mlflow`'s optional value. The server side is tests/integration/test_mlflow.py."""

from __future__ import annotations

import math

import pytest

from gpuscout.cli import optional_values
from gpuscout.cli.options import Tracking
from gpuscout.core.errors import UsageError
from gpuscout.record.trial import StoredTrial
from gpuscout.tracking.fields import of_record, of_trial, trial_id
from gpuscout.tracking.mlflow_runs import STATUS, Sent
from tests.records import make_record, make_watch_record


def test_a_token_benchmarks_figures_are_per_sample_and_what_it_lacks_is_left_out():
    # windows of 4,096, 8,192 and 6,144 tokens/s at 1,024 tokens a sequence: 4, 8 and 6 samples/s
    record = make_record(
        "gpt00001", "gpt2_small", rates=[4096, 8192, 6144], unit="tokens/s", units_per_sample=1024, samples_per_s=6.0
    )
    logged = of_record(record)
    assert logged.metrics["gpuscout/samples_per_s"] == 6.0
    assert logged.metrics["gpuscout/samples_per_s_ci95_low"] == 4.0
    assert logged.metrics["gpuscout/samples_per_s_ci95_high"] == 8.0
    # the windows are the figure's history, the figure its last step: what MLflow's run table shows
    assert logged.series == {"gpuscout/samples_per_s": [4.0, 8.0, 6.0, 6.0]}
    # no price, no telemetry, no MFU: not logged as 0
    assert not {"gpuscout/usd_per_hour", "gpuscout/power_mean_w", "gpuscout/mfu"} & set(logged.metrics)
    assert logged.params["gpuscout.precision"] == "fp32" and logged.params["gpuscout.batch_size"] == "64"
    assert all(k.startswith("gpuscout.") for k in logged.params)  # never a script's own param name
    assert all(k.startswith("gpuscout/") for k in logged.metrics)  # nor its metrics', nor MLflow's system/
    assert logged.tags["gpuscout.run_id"] == "gpt00001" and logged.tags["gpuscout.kind"] == "benchmark"


def test_a_watched_scripts_figures_verdict_and_command():
    # three windows of 50 steps of 64 samples in 1.0 s, 0.3 s of each blocked on input
    record = make_watch_record()
    logged = of_record(record)
    assert logged.metrics["gpuscout/samples_per_s"] == pytest.approx(50 * 64 / 1.0)
    assert logged.metrics["gpuscout/input_wait_share"] == pytest.approx(0.3)
    assert logged.params["gpuscout.command"] == "python train.py"
    assert logged.tags["gpuscout.verdict"].startswith(record.verdict[0].code)


def test_a_trial_logs_the_users_names_its_curve_and_why_it_ended():
    row = {
        "key": "k1",
        "index": 3,
        "sweep_hash": "h",
        "status": "pruned",
        "params": {"lr": 0.01, "units": 32},
        "result": {
            "key": "k1",
            "index": 3,
            "status": "pruned",
            "metrics": {"val_accuracy": 0.9, "loss": math.nan},
            "history": [{"epoch": 0, "val_accuracy": 0.5}, {"epoch": 1, "val_accuracy": 0.9, "loss": 0.4}],
            "duration_s": 12.5,
            "steps": {"samples_per_s": 3200.0, "step_time_s": 0.02},
            "slot": "cpu0",
            "attempts": 1,
        },
    }
    logged = of_trial("lr-sweep", StoredTrial.model_validate(row))
    assert logged.params == {"lr": "0.01", "units": "32"}
    assert logged.metrics == {
        "val_accuracy": 0.9,  # the NaN loss is not a figure: the trial's status says what happened
        "gpuscout/samples_per_s": 3200.0,
        "gpuscout/step_time_s": 0.02,
        "gpuscout/duration_s": 12.5,
    }
    # the report's number is the step (the epoch is not a metric); loss came with the second only
    assert logged.series == {"val_accuracy": [0.5, 0.9], "loss": [None, 0.4]}
    assert logged.tags["gpuscout.trial_status"] == "pruned" and STATUS["pruned"] == "KILLED"
    assert logged.run_id == trial_id("lr-sweep", "k1") == "trial:lr-sweep:k1" and logged.name == "lr-sweep trial 3"


def test_mlflow_given_without_a_value_means_mlflows_own_uri(monkeypatch):
    assert optional_values(["watch", "--mlflow", "--steps", "3", "--", "python", "--mlflow"]) == [
        "watch",
        "--mlflow=MLFLOW_TRACKING_URI",
        "--steps",
        "3",
        "--",
        "python",
        "--mlflow",  # the user's command's own
    ]
    assert optional_values(["results", "export", "--mlflow"])[-1] == "--mlflow=MLFLOW_TRACKING_URI"
    assert optional_values(["bench", "--mlflow", "http://h:5000"]) == ["bench", "--mlflow", "http://h:5000"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker:5000")
    assert Tracking("MLFLOW_TRACKING_URI").target() == ("http://tracker:5000", "gpuscout")
    assert Tracking("sqlite:///mlflow.db", "mine").target() == ("sqlite:///mlflow.db", "mine")
    assert Tracking().target() is None
    with pytest.raises(UsageError, match="give --mlflow too"):
        Tracking(None, "mine").target()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(UsageError, match="MLFLOW_TRACKING_URI is not set"):
        Tracking("MLFLOW_TRACKING_URI").target()


def test_a_runs_page_is_named_only_for_a_server():
    sent = Sent("http://mlflow:5000/", "7", "gpuscout")
    assert sent.url("abc") == "http://mlflow:5000/#/experiments/7/runs/abc"
    assert Sent("sqlite:///mlflow.db", "7", "gpuscout").url("abc") is None


def test_the_results_store_and_a_folder_are_no_mlflow_backend(tmp_path, monkeypatch):
    """Issue 79, items 1 and 8: `--mlflow sqlite:///STORE` wrote MLflow's tables into the results
    store, and gpuscout's own hint offered a folder, which MLflow 3 refuses as a backend."""
    store = tmp_path / "results.sqlite"
    link = tmp_path / "link.sqlite"
    link.symlink_to(store)
    for uri in (f"sqlite:///{store}", f"sqlite:///{store}-wal", f"sqlite:///{link}"):
        with pytest.raises(UsageError, match="gpuscout's results store"):
            Tracking(uri).target(store)
    monkeypatch.chdir(tmp_path)  # the default store: this folder's, through GPUSCOUT_STORE
    monkeypatch.setenv("GPUSCOUT_STORE", str(store))
    with pytest.raises(UsageError, match="gpuscout's results store"):
        Tracking("sqlite:///results.sqlite").target()
    for folder in (str(tmp_path / "mlruns"), "file:./mlruns", f"file://{tmp_path}/mlruns"):
        with pytest.raises(UsageError, match="no longer keeps runs in a folder"):
            Tracking(folder).target(store)
    assert Tracking(f"sqlite:///{tmp_path / 'mlflow.db'}").target(store)[0].endswith("mlflow.db")
