"""Runs sent to an MLflow tracking server through MLflow's own client (issue 63).

What it makes: one MLflow run per stored run, or a parent run with one child run each (a tune
session's runs, a sweep's trials, a bench of several configurations), in an experiment (created
when missing). A stored run of a script that logged to MLflow itself gets gpuscout's figures
added to that run of the script's, not a second run.

What it never does: cost the record. gpuscout stores first and sends after; a server that is
down, refusing or slow is one TrackingFailed line. MLflow's client would retry a failed
request 7 times with a backoff factor of 2 and wait 120 s for each answer
(MLFLOW_HTTP_REQUEST_MAX_RETRIES, _BACKOFF_FACTOR and _TIMEOUT in mlflow/environment_variables.py):
minutes on a server that is down. Here: one retry, 10 s a request, unless the user set their own.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.tracking.fields import Logged

DEFAULT_EXPERIMENT = "gpuscout"
FROM_ENV = "MLFLOW_TRACKING_URI"  # --mlflow alone: the URI MLflow itself would use
BOUNDS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
# MLflow's log_batch takes at most 1,000 metrics and 100 params a call (mlflow/utils/validation.py)
METRICS_PER_CALL = 1000
PARAMS_PER_CALL = 100
# MLflow's run statuses for gpuscout's: a run gpuscout stopped at --steps ran as asked
# (a pruned trial was ended early by the sweep's rule: KILLED, as Ray Tune's and Optuna's MLflow
# callbacks mark a stopped trial)
STATUS = {
    "ok": "FINISHED",
    "stopped": "FINISHED",
    "failed": "FAILED",
    "oom": "FAILED",
    "timeout": "FAILED",
    "interrupted": "KILLED",
    "pruned": "KILLED",
}


class TrackingFailed(Exception):
    """The tracker could not take the runs: one line, saying what and where."""


@dataclass
class Sent:
    """Where the runs went: the store's run ids to MLflow's, and the parent's."""

    tracking_uri: str
    experiment_id: str
    experiment_name: str
    runs: dict[str, str] = field(default_factory=dict)  # store run id -> MLflow run id
    parent_run_id: str | None = None
    into_script_run: bool = False

    def url(self, run_id: str | None = None) -> str | None:
        """The run's page (or the experiment's) where the tracking URI is a server's."""
        if not self.tracking_uri.startswith(("http://", "https://")):
            return None
        page = f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}"
        return f"{page}/runs/{run_id}" if run_id else page


def tracking_uri(given: str | None) -> str:
    """--mlflow's URI; given without one (FROM_ENV), MLflow's own MLFLOW_TRACKING_URI. Neither: ValueError."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "") if given in (None, FROM_ENV) else given
    if not uri.strip():
        raise ValueError(
            "--mlflow was given without a URI and MLFLOW_TRACKING_URI is not set: give --mlflow "
            "http://HOST:5000 (or sqlite:///mlflow.db)"
        )
    return uri.strip()


def not_the_store(uri: str, store: Path) -> None:
    """ValueError where `uri` would make MLflow write into gpuscout's results store (issue 79:
    `--mlflow sqlite:///STORE` added MLflow's tables to it), one of its side files, or a folder
    (MLflow 3 refuses its file backend, and a folder named by mistake may be the store's)."""
    scheme, _, rest = uri.partition("://")
    if not rest:  # a bare path
        scheme, rest = "file", uri
    if scheme.split("+")[0] not in ("sqlite", "file"):
        return
    path = Path(rest[1:] if scheme.startswith("sqlite") and rest.startswith("/") else rest).expanduser()
    if scheme == "file":
        raise ValueError(
            f"--mlflow {uri}: MLflow 3 no longer keeps runs in a folder; give sqlite:///mlflow.db or a "
            "tracking server, http://HOST:5000"
        )
    resolved, own = os.path.realpath(path), os.path.realpath(store)
    if resolved == own or any(resolved == own + side for side in ("-wal", "-shm", "-journal")):
        raise ValueError(
            f"--mlflow {uri}: that is gpuscout's results store, which no tracker may write into; give "
            "MLflow a database of its own (sqlite:///mlflow.db) or a tracking server"
        )


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """MLflow's client with gpuscout's bounds (where the user set none), and its own lines on
    stdout ("View run ... at") kept out of gpuscout's output (a --json there is a document)."""
    before = {k: os.environ.get(k) for k in BOUNDS}
    for key, value in BOUNDS.items():
        os.environ.setdefault(key, value)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)


def send(
    uri: str,
    experiment: str,
    runs: list[Logged],
    parent: Logged | None = None,
    statuses: dict[str, str] | None = None,
    into: str | None = None,
    parent_run_id: str | None = None,
) -> Sent:
    """Log `runs` (children of `parent` when given) in `experiment` at `uri`; `into`: the MLflow
    run id of the script's own run, which takes runs[0]'s figures; `parent_run_id`: a parent
    made before (a resumed sweep's), which `parent` then updates. `statuses`: each run's status
    by its Logged.run_id (FINISHED where none). TrackingFailed on anything MLflow refuses."""
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise TrackingFailed("MLflow is not installed here: pip install 'gpuscout[mlflow]'") from None
    statuses = statuses or {}
    with bounded():
        try:
            client = MlflowClient(tracking_uri=uri)
            if into is not None:
                run = client.get_run(into)
                sent = Sent(uri, run.info.experiment_id, experiment, into_script_run=True)
                _log(client, into, runs[0])
                sent.runs[runs[0].run_id or into] = into
                return sent
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else client.create_experiment(experiment)
            sent = Sent(uri, experiment_id, experiment, parent_run_id=parent_run_id)
            if parent is not None:
                sent.parent_run_id = parent_run_id or _create(client, experiment_id, parent, None)
                _log(client, sent.parent_run_id, parent)
                if parent.run_id:  # a session's or a sweep's own name in the store's links
                    sent.runs[parent.run_id] = sent.parent_run_id
            for logged in runs:
                run_id = _create(client, experiment_id, logged, sent.parent_run_id)
                _log(client, run_id, logged)
                client.set_terminated(run_id, STATUS.get(statuses.get(logged.run_id or "", "ok"), "FINISHED"))
                sent.runs[logged.run_id or logged.name] = run_id
            if sent.parent_run_id is not None:
                client.set_terminated(sent.parent_run_id, "FINISHED")
            return sent
        except TrackingFailed:
            raise
        except Exception as exc:  # MlflowException, a connection refused, a timeout, a refusal
            raise TrackingFailed(f"MLflow at {uri} did not take the runs: {_first_line(exc)}") from None


def end_script_run(uri: str, run_id: str, status: str) -> None:
    """The script's own run, left RUNNING by a script gpuscout stopped at --steps (or that
    failed): ended with its status, as MLflow's `start_run` context would have ended it."""
    from mlflow import MlflowClient

    with bounded():
        try:
            client = MlflowClient(tracking_uri=uri)
            if client.get_run(run_id).info.status == "RUNNING":
                client.set_terminated(run_id, STATUS.get(status, "FINISHED"))
        except Exception as exc:
            raise TrackingFailed(
                f"MLflow at {uri} could not end the script's run {run_id}: {_first_line(exc)}"
            ) from None


def _create(client, experiment_id: str, logged: Logged, parent_run_id: str | None) -> str:
    tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    return client.create_run(experiment_id, run_name=logged.name, tags=tags).info.run_id


def _log(client, run_id: str, logged: Logged) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now_ms = int(time.time() * 1000)
    # a metric with a series is its series (its last value is the last report's)
    metrics = [Metric(k, v, now_ms, 0) for k, v in logged.metrics.items() if k not in logged.series]
    metrics += [
        Metric(k, v, now_ms, step)
        for k, values in logged.series.items()
        for step, v in enumerate(values)
        if v is not None
    ]
    params = [Param(k, v) for k, v in logged.params.items()]
    tags = [RunTag(k, v) for k, v in logged.tags.items()]
    for start in range(0, max(len(metrics), 1), METRICS_PER_CALL):
        client.log_batch(run_id, metrics=metrics[start : start + METRICS_PER_CALL])
    for start in range(0, len(params), PARAMS_PER_CALL):
        client.log_batch(run_id, params=params[start : start + PARAMS_PER_CALL])
    client.log_batch(run_id, tags=tags)
    if logged.artifacts:
        with tempfile.TemporaryDirectory(prefix="gpuscout-mlflow-") as folder:
            for name, text in logged.artifacts.items():
                path = Path(folder, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            client.log_artifacts(run_id, folder)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + "…") if len(text) > 300 else text or type(exc).__name__


__all__ = ["DEFAULT_EXPERIMENT", "FROM_ENV", "Sent", "TrackingFailed", "end_script_run", "send", "tracking_uri"]
