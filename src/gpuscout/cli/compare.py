"""`gpuscout compare`: stored runs side by side, with ratios, intervals and significance."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from gpuscout.analysis.compare import FIELDS
from gpuscout.analysis.compare import compare as compare_runs
from gpuscout.analysis.device_causes import precision_of
from gpuscout.analysis.gate import gate
from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, StorePath, renamed
from gpuscout.cli.stored import warn_unreadable
from gpuscout.core import inputs
from gpuscout.core.errors import UsageError
from gpuscout.record import StoredRecord
from gpuscout.report import comparison as render
from gpuscout.report import exporters, terminal
from gpuscout.report.export import parse_document
from gpuscout.store import Store

HELP = """Compare stored runs: each group's throughput with its 95% CI, the ratio to a baseline
with its CI, and whether the difference is significant. The run is the unit: each run is one
value (a watched script's whole epochs where every run has two or more, else its windows'
median), and a difference is tested against the spread between runs (Welch's t on two or more
runs a side; one run against the others' spread); one run a side cannot be judged, and says so.
Runs are compared only with runs that differ in the --by field alone; different methodology
versions are never mixed; what else differs (the model, batch, precision, machine) is noted.

Examples:

    gpuscout compare --by gpu --workload resnet50

    gpuscout compare --by precision --workload bert_base --format markdown

    gpuscout compare 3fa2 9c1d              # two runs, run by run

    # a watched script before and after a fix, each run twice: the command lines are the groups
    gpuscout compare --by command --workload train.py

    gpuscout compare --by batch_size --baseline 256 --json

    # a CI gate, three runs a side exported as files: exit 1 if NEW is over 5% slower
    gpuscout compare base.json new.json --fail-slower 5

--fail-slower PCT gates each group against the baseline: exit 0 only when the ratio's interval
rules out a slowdown beyond PCT percent, 1 when a group is slower with significance AND by more
than PCT, 3 when the runs cannot decide (their spread hides the difference: the line says about
how many runs a side would; one run a side; nothing comparable), 2 for bad input. One line a
group says which, by how much, with the interval, and whether the machines differ (docs/ci.md).
"""


# What fills an empty store
NO_RUNS_YET = "run `gpuscout bench` or `gpuscout watch -- python train.py`, or `gpuscout results import FILE`"


def select(
    store: Store,
    run_ids: list[str] | None,
    workloads: list[str] | None,
    gpu: str | None,
    precision: str | None,
    backend: str | None,
) -> list[StoredRecord]:
    """The runs a report or comparison covers; filters that match nothing say what exists."""
    if run_ids:
        return [store.get(run_id) for run_id in run_ids]
    records = store.list()
    warn_unreadable(store)
    if not records:
        raise UsageError(f"{store.path} holds no runs: {NO_RUNS_YET}")
    for name, wanted in (
        ("workload", workloads),
        ("gpu", [gpu] if gpu else None),
        ("precision", [precision] if precision else None),
        ("backend", [backend] if backend else None),
    ):
        if not wanted:
            continue
        chosen = [r for r in records if any(w.lower() in _value(r, name).lower() for w in wanted)]
        if not chosen:
            present = sorted({_value(r, name) for r in records})
            raise UsageError(f"no stored run matches {name} {', '.join(wanted)}: the store has {', '.join(present)}")
        records = chosen
    return records


def _value(r: StoredRecord, name: str) -> str:
    """A record's workload, gpu, precision or backend as text, for filtering: a watched script's
    precision and backend are its main fit's."""
    if name == "workload":
        return r.workload
    if r.kind == "watch" and name != "gpu":
        main = r.main
        if main is None:
            return ""
        return precision_of(main.precision_policy).value if name == "precision" else main.backend or ""
    return str(FIELDS[name](r))


def compare(
    run_ids: list[str] | None = typer.Argument(
        None,
        metavar="[RUN_ID]...",
        help="Compare these runs (ids or prefixes), or two `results export` files, side against side.",
    ),
    by: str | None = typer.Option(
        None,
        help=f"The field that differs: run, change (a tune -- COMMAND session), command (a watched script's "
        f"command line), {', '.join(FIELDS)} [default: gpu, or run with RUN_IDs].",
    ),
    baseline: str | None = typer.Option(
        None, help="The group (a value of --by) the others are divided by [default: the first]."
    ),
    workload: list[str] | None = typer.Option(None, "--workload", "-w", help="Only these workloads (repeatable)."),
    gpu_name: str | None = typer.Option(None, "--gpu-name", help="Only runs on GPUs whose name contains this."),
    gpu: str | None = typer.Option(None, "--gpu", hidden=True, help="Now --gpu-name (--gpu is an index elsewhere)."),
    precision: str | None = typer.Option(None, help="Only this precision."),
    backend: str | None = typer.Option(None, help="Only this backend."),
    store_path: StorePath = None,
    fmt: str | None = typer.Option(
        None, "--format", help="table (for the terminal), json, markdown or csv [default: table]."
    ),
    as_json: AsJson = False,
    as_markdown: bool = typer.Option(False, "--markdown", help="Print Markdown tables: --format markdown."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV rows: --format csv."),
    fail_slower: float | None = typer.Option(
        None,
        "--fail-slower",
        metavar="PCT",
        help="A CI gate: exit 0 when the interval rules out a slowdown beyond PCT percent, 1 when slower "
        "with significance and by more than PCT, 3 when the runs cannot decide.",
    ),
) -> None:
    gpu = renamed("--gpu", "--gpu-name", gpu, gpu_name)
    shorthands = [name for name, on in (("json", as_json), ("markdown", as_markdown), ("csv", as_csv)) if on]
    if len(shorthands) + (fmt is not None) > 1:
        raise UsageError("choose one of --format, --json, --markdown and --csv")
    fmt = fmt or (shorthands[0] if shorthands else "table")
    if fail_slower is not None:
        if not 0 < fail_slower < 100:
            raise UsageError(f"--fail-slower takes a percentage between 0 and 100, got {fail_slower:g}")
        if fmt not in ("table", "json"):
            raise UsageError("--fail-slower says its verdict as text, or as JSON with --json")
    exporter = exporters.get(fmt, "comparisons", also=("table",)) if fmt != "table" else None
    files = _export_files(run_ids or [])
    sides = None
    if files:  # `compare BASE.json NEW.json`: each file's runs one side, the first the baseline
        if by not in (None, "side") or baseline is not None:
            raise UsageError("two export files are compared side against side: leave out --by and --baseline")
        records, sides = _read_sides(files)
        by, baseline = "side", files[0]
    else:
        by = by or ("run" if run_ids else "gpu")
        with Store(store_path, readonly=True) as store:
            if not run_ids and fail_slower is None and not store.count():
                # a new store: nothing to compare yet is an answer too (a CI gate's empty store is not)
                terminal.console(stderr=True).print(
                    f"note: {store.path} holds no runs yet: {NO_RUNS_YET}", markup=False, highlight=False
                )
                if exporter is not None:
                    typer.echo(exporter.comparisons([]), nl=False)
                return
            records = select(store, run_ids, workload, gpu, precision, backend)
    if run_ids and by == "run" and baseline is None:
        baseline = records[0].id  # `compare BASE NEW`: the first run named is the baseline, whenever it ran
    comparisons = compare_runs(records, by, baseline, sides)
    if fail_slower is not None:
        return _gate(comparisons, records, fail_slower, fmt == "json")
    if not comparisons:  # an answer, not a mistake: said, with an empty result in the format asked (exit 0)
        terminal.console(stderr=True).print(
            f"note: nothing to compare by {by}: the selected runs ({len(records)}) do not include two "
            f"groups that differ in {by} alone; try another --by or `gpuscout results list`",
            markup=False,
            highlight=False,
        )
    if exporter is not None:
        typer.echo(exporter.comparisons(comparisons), nl=False)
    else:
        out = terminal.console()
        for c in comparisons:
            out.print(render.table(c))
            for note in c.notes:
                out.print(f"[yellow]note[/]: {escape(note)}", highlight=False)


# What one side's file may hold: as `results import` reads (cli/results.py MAX_IMPORT_BYTES)
MAX_SIDE_BYTES = 128 * inputs.MiB


def _export_files(names: list[str]) -> list[str]:
    """The two export files named, where two files are named (a run id is never a file here)."""
    paths = [Path(n) for n in names]
    if len(paths) == 2 and all(p.suffix == ".json" and p.is_file() for p in paths):
        return names
    if any(p.suffix == ".json" and p.is_file() for p in paths):
        raise UsageError("name two export files (BASE.json NEW.json) or run ids, not both")
    return []


def _read_sides(files: list[str]) -> tuple[list[StoredRecord], dict[str, str]]:
    """Each file's runs (`results export`'s document, validated as `results import` does), and
    each run's side: the file it came from."""
    records, sides = [], {}
    for name in files:
        text = inputs.read_text(
            Path(name), "a gpuscout results file (`gpuscout results export` writes one)", MAX_SIDE_BYTES
        )
        for record in parse_document(text, name):
            if record.id in sides:
                raise UsageError(f"run {record.id} is in both {sides[record.id]} and {name}: a run is one side's")
            sides[record.id] = name
            records.append(record)
    return records, sides


def _gate(comparisons, records: list[StoredRecord], fail_slower: float, as_json: bool) -> None:
    """The gate's lines (or its JSON), then its exit status (analysis/gate.py)."""
    result = gate(comparisons, records, fail_slower)
    emit(result, as_json)
    raise typer.Exit(result.exit_code)
