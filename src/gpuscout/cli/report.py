"""`gpuscout report`: the stored results as one self-contained HTML file (or Markdown + PNGs)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuscout.cli.options import Selection, StorePath, grouped, one_format
from gpuscout.cli.stored import warn_unreadable
from gpuscout.comparison import select
from gpuscout.core import outputs
from gpuscout.core.errors import UsageError
from gpuscout.core.units import counted
from gpuscout.report import exporters, terminal
from gpuscout.store import Store, default_store_path

HELP = """Write a report of stored runs: machines, throughput with error bars, cost efficiency, scaling,
batch size, ablations, telemetry over time, and every run's provenance, in one HTML file that
opens offline (no CDN), with sortable and filterable tables.

Examples:

    gpuscout report --out report.html

    gpuscout report --workload resnet50 --gpu-name H100 --out h100.html

    # PNG plots in results/report_files/
    gpuscout report --format markdown --out results/report.md
"""


@grouped
def report(
    run_ids: list[str] | None = typer.Argument(None, metavar="[RUN_ID]...", help="Only these runs."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Where to write [default: report.html, or report.md]."),
    fmt: str | None = typer.Option(
        None, "--format", help="html (self-contained: opens offline) or markdown (PNG plots beside it) [default: html]."
    ),
    markdown: bool = typer.Option(False, "--markdown", help="--format markdown."),
    selection: Selection = Selection(),
    telemetry_run: str | None = typer.Option(
        None, help="The run whose telemetry is plotted [default: the newest with telemetry]."
    ),
    title: str = typer.Option("gpuscout report", help="The report's title."),
    force: bool = typer.Option(
        False, "--force", help="Replace --out even when gpuscout did not write it (never the store)."
    ),
    store_path: StorePath = None,
) -> None:
    filters = selection.filters()
    exporter = exporters.get(one_format(fmt, "html", markdown=markdown), "report")
    out = out or Path(f"report{exporter.suffix}")
    from gpuscout.report import document

    store_file = store_path or default_store_path()
    beside = exporter.files_beside
    target = outputs.check_output(
        out, store_file, force, needs_file=f"a {exporter.title} report writes its plots beside it" if beside else None
    )
    assets = None
    if beside:  # its plots' folder beside it, checked before any drawing
        folder = exporters.assets_folder(target.file)
        assets = outputs.own_folder(folder, store_file, "the report's plots folder", make=False)

    with Store(store_path, readonly=True) as store:
        sweeps = {name: store.trials(name) for name in store.sweeps()} if not run_ids else {}
        # a store of command sweeps holds trials and no runs: its report is the sweeps'
        records = select(store, run_ids, filters) if store.count() or not sweeps else []
        warn_unreadable(store)
        chosen = store.get(telemetry_run) if telemetry_run else None
    if chosen is not None and not (chosen.telemetry and chosen.telemetry.samples):
        raise UsageError(f"run {chosen.id} has no telemetry samples (a CPU run or --no-telemetry)")
    if chosen is None:
        chosen = document.newest_with_telemetry(records)
    from gpuscout.cli.session_report import saved_bests
    from gpuscout.report.watched_sections import tune_groups

    decided = saved_bests(store_file, tune_groups([r for r in records if r.kind == "watch"]))
    doc = document.build(records, chosen, title, sweeps, decided)
    err = terminal.console(stderr=True)
    with err.status(f"drawing the report of {len(records)} run(s)…"):
        written = exporter.report(doc, assets.name if assets else "")
        if assets is not None:
            for name in written.files:  # every plot checked before the first is written
                outputs.check_inside(assets, name, store_file, "the report's plot", ("png",), force=force)
            outputs.own_folder(assets, store_file, "the report's plots folder")
            for name, data in written.files.items():
                outputs.replace_inside(assets, name, data, store_file, "the report's plot", ("png",), force=force)
        outputs.write(target, written.text)
    plotted = f", {len(written.files)} plot files" if beside else ""
    err.print(f"wrote {out} ({counted(len(records), 'run')}{plotted})", markup=False)
