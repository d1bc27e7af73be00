"""`--mlflow [URI]` and `--experiment NAME` on the verbs that store runs (watch, tune, bench, sweep)
and `results export --mlflow`: the stored runs sent to MLflow after they are stored, each link
kept in the store (issue 63). A tracker that cannot take them costs one warning line, never the
record or the command's exit status."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from rich.console import Console

from gpuscout.core.units import counted
from gpuscout.record import StoredRecord
from gpuscout.record.trial import StoredTrial
from gpuscout.record.watch import WatchRecord
from gpuscout.report import terminal
from gpuscout.store import Store, StoreError
from gpuscout.store.tracked import TrackedRun
from gpuscout.tracking import mlflow_runs
from gpuscout.tracking.fields import PREFIX, TAG, Logged, of_record, of_trial, trial_id

# A document's text, as the terminal shows it (an artifact read in MLflow's viewer)
ARTIFACT_WIDTH = 100


def send(
    target: tuple[str, str] | None,
    records: list[StoredRecord],
    store: Store,
    parent: Logged | None = None,
    extra: dict[str, dict[str, str]] | None = None,
) -> list[mlflow_runs.Sent] | None:
    """Log the stored `records` to MLflow, children of `parent` where given (`extra`: params by
    run id, a sweep trial's), and keep the links in `store`. Without a parent, a record whose
    script logged to MLflow itself adds to that run. Says where on stderr; a failure is one
    warning line (None), the records being stored already."""
    if target is None or not records:
        return None
    uri, experiment = target
    own = _script_runs(records, store) if parent is None else {}
    logged = {r.id: _with_artifacts(r) for r in records}
    for run_id, item in logged.items():
        item.params.update((extra or {}).get(run_id, {}))
    rest = [r for r in records if r.id not in own]
    calls = [partial(_into_script_run, own[r.id], experiment, logged[r.id], r.status) for r in records if r.id in own]
    if rest:
        statuses = {r.id: r.status for r in rest}
        calls.append(partial(mlflow_runs.send, uri, experiment, [logged[r.id] for r in rest], parent, statuses))
    later = (
        f"every run is stored in {store.path} all the same (`gpuscout results export --mlflow {uri} "
        f"{' '.join(r.id for r in records[:3])}` sends them later)"
    )
    return _deliver(calls, store, later)


def _into_script_run(link: TrackedRun, experiment: str, logged: Logged, status: str) -> mlflow_runs.Sent:
    """A watched record's figures added to its script's own MLflow run, which is then ended."""
    sent = mlflow_runs.send(link.tracking_uri, experiment, [logged], into=link.tracker_run_id)
    mlflow_runs.end_script_run(link.tracking_uri, link.tracker_run_id, status)
    return sent


def _deliver(calls: list, store: Store, later: str) -> list[mlflow_runs.Sent] | None:
    """Each call's runs into MLflow, in order; the links of those that went kept in the store (a
    call before a failing one too); where they went said, or one warning line ending in `later`."""
    err = terminal.console(stderr=True, highlight=False)
    sent = []
    try:
        for call in calls:
            sent.append(call())
    except mlflow_runs.TrackingFailed as exc:
        err.print(f"warning: {exc}; {later}", markup=False)
        return None
    finally:
        _keep_links(sent, store, err)
    for each in sent:
        _say(err, each)
    return sent


def _keep_links(sent: list[mlflow_runs.Sent], store: Store, err: Console) -> None:
    """Each MLflow run id in the store beside its run (a run sent before a later one failed too)."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    links = [
        TrackedRun(run_id, "mlflow", each.tracking_uri, each.experiment_id, mlflow_id, origin, now)
        for each in sent
        for origin in ("script" if each.into_script_run else "gpuscout",)
        for run_id, mlflow_id in each.runs.items()
    ]
    try:
        store.mark_tracked(links)
    except StoreError as exc:  # the runs are in MLflow and in the store: only the link is lost
        err.print(f"warning: the store did not keep the MLflow run ids ({exc})", markup=False)


def send_session(
    target: tuple[str, str] | None,
    verb: str,
    report,
    render,
    store_path: Path,
    run_ids: list[str] | None = None,
    metrics: dict[str, float | None] | None = None,
    params: dict[str, str | None] | None = None,
    diff: str | None = None,
) -> None:
    """A session (tune's) as one parent MLflow run, its stored runs (`run_ids`, else the
    session's group) as children: the parent holds the session's figures, its report as JSON and
    as the terminal showed it, and a patch. The store is opened only with --mlflow."""
    if target is None:
        return
    fields = report.as_json()
    parent = Logged(
        name=f"{verb} {fields.get('workload', '')} ({fields['session']})".replace("  ", " "),
        params={f"{TAG}{k}": v for k, v in (params or {}).items() if v is not None},
        metrics={f"{PREFIX}{k}": float(v) for k, v in (metrics or {}).items() if v is not None},
        tags={f"{TAG}session": fields["session"], f"{TAG}kind": verb},
        run_id=f"session:{fields['session']}",
        artifacts={
            f"gpuscout/{verb}.json": json.dumps(fields, indent=2, default=str),
            f"gpuscout/{verb}.txt": _text_of(lambda out: render(report, out)),
            **({"gpuscout/patch.diff": diff} if diff else {}),
        },
    )
    with Store(store_path) as store:
        records = (
            [store.get(run_id) for run_id in dict.fromkeys(run_ids)]
            if run_ids is not None
            else store.list(group=fields["session"])
        )
        send(target, records, store, parent)


def send_group(target: tuple[str, str] | None, verb: str, records: list[StoredRecord], store_path: Path) -> None:
    """One command's runs (a bench of several workloads or batch sizes): one MLflow run, or a
    parent with a child run each. The store is opened only with --mlflow."""
    if target is None or not records:
        return
    group = records[0].group_id
    parent = (
        Logged(name=f"{verb} ({group})", tags={f"{TAG}group_id": group, f"{TAG}kind": verb})
        if len(records) > 1
        else None
    )
    with Store(store_path) as store:
        send(target, records, store, parent)


def send_sweep(target: tuple[str, str] | None, summary, render, store: Store) -> None:
    """A sweep as one parent MLflow run, each ended trial a child run (its hyperparameters as
    params, what it reported as metrics and series). A resumed sweep adds its new trials under
    the parent it made before; a trial logged already is not logged twice."""
    if target is None:
        return
    uri, experiment = target
    sweep = summary.sweep
    trials = [
        t
        for t in store.trials(sweep)
        if t.status not in ("running", "pending") and not _links(store, trial_id(sweep, t.key), uri)
    ]
    logged = [of_trial(sweep, t, _record_of(store, t)) for t in trials]
    earlier = _links(store, f"sweep:{sweep}", uri)
    if not logged and earlier:  # a resume that ran nothing new
        terminal.console(stderr=True, highlight=False).print(
            f"MLflow: every trial of {sweep} is in run {earlier[-1].tracker_run_id} already", markup=False
        )
        return
    best = summary.best[0] if summary.best else None
    parent = Logged(
        name=f"sweep {sweep}",
        params={
            f"{TAG}strategy": summary.strategy.kind,
            f"{TAG}metric": f"{summary.metric.name} ({summary.metric.direction})",
            f"{TAG}trials": str(summary.trials),
        },
        metrics={
            f"{PREFIX}{k}": float(v)
            for k, v in {
                f"best_{summary.metric.name}": best.value if best else None,
                "wall_s": summary.wall_s,
                "gpu_hours": summary.gpu_hours,
                "cost_usd": summary.cost_usd,
                **{f"trials_{status}": n for status, n in summary.status_counts.items()},
            }.items()
            if v is not None
        },
        tags={f"{TAG}kind": "sweep", f"{TAG}sweep": sweep},
        artifacts={
            "gpuscout/sweep.json": json.dumps(summary.as_json(), indent=2, default=str),
            "gpuscout/sweep.txt": _text_of(lambda out: render(summary, out)),
        },
        run_id=f"sweep:{sweep}",
    )
    statuses = {item.run_id: t.status for item, t in zip(logged, trials)}
    again = earlier[-1].tracker_run_id if earlier else None
    _deliver(
        [partial(mlflow_runs.send, uri, experiment, logged, parent, statuses, parent_run_id=again)],
        store,
        f"the sweep is stored in {store.path} all the same",
    )


def _links(store: Store, run_id: str, uri: str) -> list[TrackedRun]:
    return [link for link in store.tracked(run_id) if link.tracking_uri == uri]


def _record_of(store: Store, trial: StoredTrial) -> StoredRecord | None:
    run_id = trial.result.run_id if trial.result else None
    try:
        return store.get(run_id) if run_id else None
    except StoreError:  # a trial's run not in this store (an import of the trials alone)
        return None


def hint(record: StoredRecord, store: Store) -> None:
    """Without --mlflow, a script that logged to MLflow itself is told how to add gpuscout's figures."""
    for link in _script_runs([record], store).values():
        terminal.console(stderr=True, highlight=False).print(
            f"your script logged to MLflow run {link.tracker_run_id}: `gpuscout results export --mlflow "
            f"{link.tracking_uri} {record.id}` adds gpuscout's figures to it",
            markup=False,
        )


def _say(err: Console, sent: mlflow_runs.Sent) -> None:
    if sent.into_script_run:
        (mlflow_id,) = sent.runs.values()
        where, url = f"added to your script's own MLflow run {mlflow_id}", sent.url(mlflow_id)
    elif sent.parent_run_id:
        children = sum(1 for mlflow_id in sent.runs.values() if mlflow_id != sent.parent_run_id)
        where = f"logged to MLflow: {children} run(s) under {sent.parent_run_id} in {sent.experiment_name!r}"
        url = sent.url(sent.parent_run_id)
    elif len(sent.runs) == 1:
        (mlflow_id,) = sent.runs.values()
        where, url = f"logged to MLflow as run {mlflow_id} in {sent.experiment_name!r}", sent.url(mlflow_id)
    else:
        where, url = f"logged to MLflow: {counted(len(sent.runs), 'run')} in {sent.experiment_name!r}", sent.url()
    err.print(f"{where}{f' ({url})' if url else f' at {sent.tracking_uri}'}", markup=False)


def _script_runs(records: list[StoredRecord], store: Store) -> dict[str, TrackedRun]:
    """The script's own MLflow run of a watched record, where watch saw one."""
    return {r.id: link for r in records for link in store.tracked(r.id) if link.origin == "script"}


def _with_artifacts(record: StoredRecord) -> Logged:
    """The run's fields, and for a watched script its verdict (as the terminal showed it), its
    HTML report and its whole record."""
    logged = of_record(record)
    if isinstance(record, WatchRecord):
        from gpuscout.report import html
        from gpuscout.report.document import build
        from gpuscout.report.watch import print_watch

        logged.artifacts["gpuscout/verdict.txt"] = _text_of(lambda out: print_watch(out, record))
        logged.artifacts["gpuscout/report.html"] = html.render(
            build([record], None, title=f"gpuscout watch {record.workload}")
        )
    logged.artifacts["gpuscout/record.json"] = record.model_dump_json(indent=2)
    return logged


def _text_of(draw) -> str:
    buffer = io.StringIO()
    draw(Console(file=buffer, width=ARTIFACT_WIDTH, color_system=None, highlight=False, soft_wrap=False))
    return buffer.getvalue()
