"""How a verb's result reaches the user: `emit(result, as_json)`, or `emit(result, fmt=F)`.

A command reads its options, builds its request, calls its verb once and hands what came back to
`emit`, which picks the result's two views by the result's type: its JSON document for `--json`
(for scripts, on stdout, nothing else there) and its terminal view otherwise (report/'s). As
hyperfine's main.rs hands its results to the exporter chosen, no command writes an `if as_json`
branch of its own, and a new result type is one row of `_views`. The file formats of a result
(compare's Markdown and CSV, the HTML report) are its exporters' (report/exporters/); a view
that prints one takes `fmt`. What a result says beside itself (a damaged run left out, nothing
to compare) goes to stderr in every format, so that stdout holds the document alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import typer
from rich.console import Console

from gpuscout.core.versions import __version__
from gpuscout.record.document import json_document
from gpuscout.report import terminal


@dataclass(frozen=True)
class View:
    """A result type's two views; `stderr`: its terminal view is a note beside the work done (a
    salvage's account), not the command's output."""

    to_json: Callable[[Any], str]
    to_terminal: Callable[[Any, Console], None]
    stderr: bool = False
    # the result in one of its exporters' formats (compare's markdown and csv), by name
    to_format: Callable[[Any, str], str] | None = None
    # what the result says beside itself, a line each, on stderr whatever the format
    said: Callable[[Any], list[str]] | None = None


def emit(result: object, as_json: bool = False, fmt: str | None = None) -> None:
    """`result` as JSON on stdout (`as_json`, or `fmt` "json"), in another of its formats
    (`fmt`), or as its terminal view (`fmt` "table" or None)."""
    view = view_of(type(result))
    fmt = "json" if as_json else fmt or "table"
    if view.said is not None:
        err = terminal.console(stderr=True, highlight=False)
        for line in view.said(result):
            err.print(line, markup=False, soft_wrap=True)
    if fmt == "json":
        typer.echo(view.to_json(result))
    elif fmt == "table":
        view.to_terminal(result, terminal.console(stderr=view.stderr, highlight=False))
    elif view.to_format is not None:
        typer.echo(view.to_format(result, fmt), nl=False)
    else:
        raise TypeError(f"a {type(result).__name__} has no {fmt} view: add to_format to its View")


def view_of(kind: type) -> View:
    views = _views()
    for base in kind.__mro__:  # the most specific type registered
        if base in views:
            return views[base]
    raise TypeError(f"no view for a {kind.__name__}: add it to gpuscout.cli.emit._views")


def as_document(result: Any) -> str:
    """A typed result's own JSON: its `as_json()`, else its fields (pydantic or a dataclass)."""
    if hasattr(result, "as_json"):
        fields = result.as_json()
    elif hasattr(result, "model_dump"):
        fields = result.model_dump(mode="json")
    else:
        fields = asdict(result)
    return json.dumps(fields, indent=2, default=str)


def session_document(report: Any) -> str:
    """A session's report as its JSON file holds it (and `--json` prints it): its fields, with the
    version that wrote them. `report`: a typed result with `as_json()` (scale's, tune's of a
    script or of a workload)."""
    return json.dumps({"gpuscout_version": __version__, **report.as_json()}, indent=2, default=str)


def _compared_json(result: Any) -> str:
    """`compare --json`: the gate's document, or the comparisons' (as `--format json` writes them)."""
    if result.gate is not None:
        return as_document(result.gate)
    return _compared_as(result, "json").rstrip("\n")


def _compared_as(result: Any, name: str) -> str:
    """The comparisons in one of their file formats (report/exporters/)."""
    from gpuscout.report import exporters

    return exporters.get(name, "comparisons", also=("table",)).comparisons(result.comparisons)


@cache
def _views() -> dict[type, View]:
    """Imported when first asked: the report's modules (rich's tables, the plots') stay out of a
    command that prints nothing, and out of `--help`."""
    from gpuscout.analysis.gate import GateResult
    from gpuscout.bench import BenchResult
    from gpuscout.catalog.listing import CatalogListing
    from gpuscout.comparison import Compared
    from gpuscout.doctor import DoctorResult, Explained
    from gpuscout.infer import InferenceResult
    from gpuscout.recommend.advice import Advice
    from gpuscout.record.watch import WatchRecord
    from gpuscout.report import (
        catalog,
        comparison,
        console,
        doctor,
        explain,
        recommend,
        scale,
        store,
        sweep,
        tune,
        tune_script,
    )
    from gpuscout.report import watch as watch_report
    from gpuscout.scale.results import ClusterPlan, Merged, ScaleReport, WorkerDone
    from gpuscout.store.repair import CheckReport, SalvageReport
    from gpuscout.sweep.results import SweepSummary
    from gpuscout.tune.results import ScriptPlan, TuneScriptReport
    from gpuscout.tune.workload_results import WorkloadTuneReport

    return {
        store.Listed: View(lambda r: json_document(r.records), store.print_listed),
        store.Shown: View(lambda r: json_document([r.record]), store.print_shown),
        CheckReport: View(lambda c: json.dumps({**asdict(c), "ok": c.ok}, indent=2), store.print_check),
        SalvageReport: View(as_document, store.print_salvage, stderr=True),
        BenchResult: View(
            lambda b: json_document(b.records, summaries=b.summaries), lambda b, out: console.print_bench(out, *b)
        ),
        InferenceResult: View(
            lambda i: json_document(i.records, latency_targets=i.verdicts),
            lambda i, out: console.print_inference(out, *i),
        ),
        CatalogListing: View(as_document, catalog.print_listing),
        GateResult: View(as_document, comparison.print_gate),
        Compared: View(_compared_json, comparison.print_compared, to_format=_compared_as, said=lambda c: c.said),
        DoctorResult: View(lambda d: json.dumps(d.report, indent=2), lambda d, out: doctor.print_doctor(d.report, out)),
        Explained: View(as_document, explain.print_explained),
        SweepSummary: View(as_document, sweep.print_summary),
        Advice: View(as_document, recommend.print_advice),
        WatchRecord: View(lambda r: json_document([r]), lambda r, out: watch_report.print_watch(out, r)),
        ScaleReport: View(session_document, scale.print_scale),
        ClusterPlan: View(as_document, scale.print_plan),
        WorkerDone: View(as_document, scale.print_worker, stderr=True),
        Merged: View(as_document, scale.print_merged),
        TuneScriptReport: View(session_document, tune_script.print_tune_script),
        ScriptPlan: View(as_document, tune_script.print_plan),
        WorkloadTuneReport: View(session_document, tune.print_tune),
    }
