"""Inside a watched script: the script's own MLflow run, where it logs to one (`mlflow.autolog()`
or a run it started), told to gpuscout so that `--mlflow` adds its figures to that run rather
than starting another (issue 63). MLflow is never imported here: only a script that imported it
has a run to tell."""

from __future__ import annotations

import sys

from gpuscout.child.watch_state import emit, report_failure

_told: set[str] = set()


def tell_active_run() -> None:
    """At a fit's start (autolog starts its run inside fit, before the callbacks' begin)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        run = mlflow.active_run()
        if run is None or run.info.run_id in _told:
            return
        _told.add(run.info.run_id)
        emit(
            "watch_mlflow_run",
            run_id=run.info.run_id,
            experiment_id=run.info.experiment_id,
            tracking_uri=str(mlflow.get_tracking_uri()),
        )
    except Exception as exc:  # the user's MLflow, whatever its version: never their training's end
        report_failure("reading the script's MLflow run", exc)
