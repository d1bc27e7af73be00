"""`gpuscout results list|show|export`: what the store holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import get_args

import typer

from gpuscout.cli import handle_errors
from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, StorePath, Tracking, grouped
from gpuscout.cli.stored import warn_unreadable
from gpuscout.core import inputs, outputs
from gpuscout.core.errors import UsageError
from gpuscout.core.text import control_fields
from gpuscout.record import STORED
from gpuscout.record.run import SCHEMA_VERSION, Status
from gpuscout.report import exporters, terminal
from gpuscout.report import store as store_report
from gpuscout.store import Store, default_store_path, repair
from gpuscout.store.documents import parse_document
from gpuscout.store.migrate import migrate as migrate_store
from gpuscout.tracking import sending as tracking

app = typer.Typer(
    help="Stored benchmark results: list, show, export, import, check, salvage, schema, migrate.", no_args_is_help=True
)


# A benchmark run's statuses (record/run.py), then a watched script's (record/watch.py)
STATUSES = (*get_args(Status), "stopped", "interrupted")


@app.command("list")
@handle_errors
def list_(
    workload: str | None = typer.Option(None, help="Only this workload."),
    status: str | None = typer.Option(
        None, help="Only runs with this status (ok, oom, failed, timeout; watched scripts: stopped, interrupted)."
    ),
    kind: str | None = typer.Option(None, help="Only this kind of record: benchmark | watch."),
    limit: int = typer.Option(50, help="At most this many, newest first."),
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    """List stored runs, newest first.

    Example: gpuscout results list --workload resnet50 --limit 10
    """
    if limit < 1:
        raise UsageError(f"--limit must be >= 1, got {limit}")
    if kind not in (None, "benchmark", "watch"):
        raise UsageError(f"unknown --kind {kind!r}: choose benchmark or watch")
    if status is not None and status not in STATUSES:
        raise UsageError(f"unknown --status {status!r}: choose {', '.join(STATUSES)}")
    with Store(store_path, readonly=True) as store:
        records = store.list(workload=workload, status=status, limit=limit, kind=kind)
    warn_unreadable(store)
    emit(store_report.Listed(records), as_json)


@app.command("show")
@handle_errors
def show(
    run_id: str = typer.Argument(..., help="Run id or a unique prefix of it."),
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    """Show one run with its provenance.

    Example: gpuscout results show 3fa2
    """
    with Store(store_path, readonly=True) as store:
        record = store.get(run_id)
        links = store.tracked(record.id)
    emit(store_report.Shown(record, links), as_json)


@app.command("export")
@handle_errors
@grouped
def export(
    run_ids: list[str] | None = typer.Argument(None, help="Only these runs (ids or unique prefixes).", metavar="RUN"),
    fmt: str = typer.Option(
        "json", "--format", help="json (whole records, as `results import` reads them) or csv (one row a run)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write here instead of stdout."),
    workload: str | None = typer.Option(None, help="Only this workload."),
    group: str | None = typer.Option(None, help="Only the runs of this group: one bench, scale session or cluster."),
    force: bool = typer.Option(
        False, "--force", help="Replace -o even when gpuscout did not write it (never the store)."
    ),
    *,
    track: Tracking,
    store_path: StorePath = None,
) -> None:
    """Export stored runs as JSON (whole records) or CSV (one flat row per run), or to MLflow.

    Examples:

        gpuscout results export --format csv -o runs.csv

        gpuscout results export > all.json

        # a multi-host worker's runs
        gpuscout results export --group c0ffee12 -o worker-1.json

        # runs already stored, as MLflow runs (the ids kept in the store)
        gpuscout results export --mlflow http://mlflow:5000 3fa2 77b1
    """
    target_mlflow = track.target(store_path)
    if target_mlflow is not None:
        if out is not None or fmt != "json":
            raise UsageError("--mlflow sends the runs to MLflow: leave out --format and -o")
        return _to_mlflow(target_mlflow, run_ids or [], workload, group, store_path)
    exporter = exporters.get(fmt, "runs")
    target = outputs.check_output(out, store_path or default_store_path(), force, "-o") if out is not None else None
    with Store(store_path, readonly=True) as store:
        records = _chosen(store, run_ids or [], workload, group)
    warn_unreadable(store)
    text = exporter.runs(records)
    if target is None:
        typer.echo(text, nl=False)
    else:
        outputs.write(target, text)
        terminal.console(stderr=True).print(f"wrote {len(records)} run(s) to {out}", markup=False)
    if fmt == "json" and len(text) > MAX_IMPORT_BYTES:
        terminal.console(stderr=True).print(
            f"note: this export is larger than `gpuscout results import` reads ({MAX_IMPORT_BYTES // inputs.MiB} MiB): "
            "export it in parts (--group, --workload) to import it elsewhere",
            markup=False,
        )


def _chosen(store: Store, run_ids: list[str], workload: str | None, group: str | None) -> list:
    """The runs named (in the order given), or those of the filters."""
    if not run_ids:
        return store.list(workload=workload, group=group)
    if workload or group:
        raise UsageError("name runs or filter them with --workload/--group, not both")
    return list({r.id: r for r in (store.get(run_id) for run_id in run_ids)}.values())


def _to_mlflow(
    target: tuple[str, str], run_ids: list[str], workload: str | None, group: str | None, store_path
) -> None:
    with Store(store_path, create=False) as store:
        records = _chosen(store, run_ids, workload, group)
        if not records:
            raise UsageError("no stored runs match: nothing to send to MLflow")
        sent = tracking.send(target, records, store)
    raise typer.Exit(0 if sent is not None else 1)


# What one import reads: a valid export is parsed and validated whole before anything is stored
# (all or nothing), at about 9 MiB/s and 8x its size in memory on the CI's CPU (44 MiB of records:
# 5.0 s, 337 MB resident, 2026-11-27); 128 MiB is about 1,300 watched runs with their telemetry, or
# 35,000 benchmark runs, read in about 15 s. Larger is refused at once by its size: export in parts.
MAX_IMPORT_BYTES = 128 * inputs.MiB


@app.command("import")
@handle_errors
def import_(
    path: Path = typer.Argument(..., help="A JSON file written by `gpuscout results export` (on any machine)."),
    store_path: StorePath = None,
) -> None:
    """Import runs from another machine's export, all or nothing; runs already stored are skipped.
    Every record is validated first (older exports are brought to this schema): one that is wrong
    is named with its field, and nothing is stored.

    Example: gpuscout results import h100-box.json && gpuscout report --out all-gpus.html
    """
    text = inputs.read_text(
        path,
        "a gpuscout results file (`gpuscout results export` writes one; a larger "
        "store is exported in parts: --group, --workload)",
        MAX_IMPORT_BYTES,
    )
    with terminal.console(stderr=True).status(f"reading {len(text) / inputs.MiB:,.1f} MiB of records…"):
        records = parse_document(text, str(path))
    held = [(r.id, fields) for r in records if (fields := control_fields(r.model_dump(mode="json")))]
    if held:  # stored as they are (the record is the contract); every display shows them escaped
        run_id, fields = held[0]
        terminal.console(stderr=True).print(
            f"note: {len(held)} record(s) hold control characters in their text (run {run_id}: "
            f"{', '.join(fields[:3])}{', …' if len(fields) > 3 else ''}): gpuscout shows them escaped, as \\x1b",
            markup=False,
        )
    with Store(store_path) as store:
        added = store.put_many(records)
    terminal.console(stderr=True).print(
        f"imported {added} new run(s) from {path} ({len(records) - added} already stored) into {store.path}",
        markup=False,
    )


@app.command("check")
@handle_errors
def check(store_path: StorePath = None, as_json: AsJson = False) -> None:
    """Check the store: SQLite's integrity check of the file, then every record and sweep trial
    read and validated. Exit 0 when all is well, 1 when something is damaged (the file is only
    read).

    Example: gpuscout results check --store ~/results.sqlite || gpuscout results salvage --out fixed.sqlite
    """
    report = repair.check(store_path or default_store_path())
    emit(report, as_json)
    if not report.ok:
        raise typer.Exit(1)


@app.command("salvage")
@handle_errors
def salvage(
    out: Path = typer.Option(..., "--out", "-o", help="The new store to write (a file that does not exist yet)."),
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    """Copy every record and sweep trial that can still be read and validates out of a damaged
    store into a new one; the damaged file is only read. Say what was left behind.

    Example: gpuscout results salvage --store ~/results.sqlite --out ~/results-salvaged.sqlite
    """
    # the new store is a file of its own: never the damaged one, a file beside it, a link or a stream
    target = outputs.check_output(
        out,
        store_path or default_store_path(),
        False,
        "--out",
        needs_file="salvage writes a new store (an SQLite file)",
        new=True,
    )
    room = os.pathconf(target.file.parent, "PC_NAME_MAX") - len("-journal") if target.file.parent.is_dir() else 247
    if len(os.fsencode(out.name)) > room:  # SQLite keeps NAME-journal and NAME-wal beside a store
        raise UsageError(
            f"--out {out.name[:40]}…: a store's name leaves room for SQLite's -journal beside it: {room} bytes at most"
        )
    emit(repair.salvage(store_path or default_store_path(), out), as_json)


@app.command("schema")
@handle_errors
def schema() -> None:
    """Print the JSON Schema of a stored record: what `results export`, `bench --json` and the
    other --json outputs hold in their "runs" list. Validate exports against it with any JSON
    Schema tool (docs/results.md).

    Example: gpuscout results schema > gpuscout-record.schema.json
    """
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **STORED.json_schema(),
        "title": f"gpuscout stored record (a benchmark run or a watched script), schema {SCHEMA_VERSION}",
    }
    typer.echo(json.dumps(schema, indent=2))


@app.command("migrate")
@handle_errors
def migrate(store_path: StorePath = None) -> None:
    """Bring a store written by an older gpuscout to this version's schema, all or nothing; a copy
    of the file is kept beside it first. A store from a newer gpuscout is refused.

    Example: gpuscout results migrate --store ~/old-results.sqlite
    """
    done = migrate_store(store_path or default_store_path())
    err = terminal.console(stderr=True, highlight=False)
    if done.backup is None:
        err.print(f"{done.path} is already at schema {done.from_version}: nothing to do", markup=False)
    else:
        err.print(
            f"migrated {done.records} run(s) in {done.path} from schema {done.from_version} to "
            f"{SCHEMA_VERSION}; the original is kept as {done.backup}",
            markup=False,
        )
