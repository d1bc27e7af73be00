"""`gpuscout compare`: stored runs side by side, with ratios, intervals and significance."""

from __future__ import annotations

import typer

from gpuscout import comparison
from gpuscout.analysis.compare import FIELDS
from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, Selection, StorePath, grouped, one_format
from gpuscout.comparison import CompareRequest
from gpuscout.report import exporters

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


@grouped
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
    selection: Selection = Selection(),
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
    fmt = one_format(fmt, "table", json=as_json, markdown=as_markdown, csv=as_csv)
    if fmt != "table":  # a format the registry writes comparisons in (report/exporters/)
        exporters.get(fmt, "comparisons", also=("table",))
    request = CompareRequest(tuple(run_ids or ()), by, baseline, selection.filters(), fail_slower, fmt, store_path)
    result = comparison.compare(request)
    emit(result, fmt=request.fmt)
    raise typer.Exit(result.exit_code)
