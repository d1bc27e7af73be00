"""Every file format behind one door (report/exporters): the formats each subject has, the same
bytes as before through them, a refused format named with the ones that exist, and a new format
that is one registered class, reached by `results export`, `compare` and `report` unchanged."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from gpuscout.analysis.compare import compare as compare_runs
from gpuscout.cli import app
from gpuscout.core.errors import UsageError
from gpuscout.report import exporters
from gpuscout.report.exporters import base
from gpuscout.store import Store
from tests.records import make_record

RECORDS = [make_record("run00001", median=100.0), make_record("run00002", median=150.0, precision="mixed_bfloat16")]


def test_each_subject_has_its_formats_and_an_unknown_one_is_named_with_them():
    assert exporters.names("runs") == ["csv", "json"]
    assert exporters.names("comparisons") == ["csv", "json", "markdown"]
    assert exporters.names("report") == ["html", "markdown"]
    with pytest.raises(UsageError, match=r"unknown --format 'html' for stored runs: choose csv or json$"):
        exporters.get("html", "runs")
    with pytest.raises(UsageError, match=r"for comparisons: choose csv, json, markdown or table$"):
        exporters.get("xml", "comparisons", also=("table",))


def test_the_formats_write_what_they_say():
    runs = json.loads(exporters.get("json", "runs").runs(RECORDS))
    assert [r["id"] for r in runs["runs"]] == ["run00001", "run00002"] and runs["schema_version"] >= 1
    rows = list(csv.DictReader(io.StringIO(exporters.get("csv", "runs").runs(RECORDS))))
    assert [(r["id"], r["precision"], float(r["throughput_median"])) for r in rows] == [
        ("run00001", "fp32", 100.0),
        ("run00002", "mixed_bfloat16", 150.0),
    ]
    comparisons = compare_runs(RECORDS, "precision", None)
    as_json = json.loads(exporters.get("json", "comparisons").comparisons(comparisons))
    groups = as_json["comparisons"][0]["groups"]
    assert [g["label"] for g in groups] == ["fp32", "mixed_bfloat16"] and groups[0]["ratio"] is None
    assert groups[1]["ratio"] == pytest.approx(1.5)
    table = exporters.get("markdown", "comparisons").comparisons(comparisons)
    # one run a side: the ratio without an interval between runs, and no verdict on one run each
    assert "| mixed_bfloat16 | 1 | 150.0 [150.0–150.0] | 1.500 | one run a side | cannot tell |" in table
    by_group = list(csv.DictReader(io.StringIO(exporters.get("csv", "comparisons").comparisons(comparisons))))
    assert [(r["group"], r["ratio"]) for r in by_group] == [("fp32", ""), ("mixed_bfloat16", "1.5")]


def test_a_watched_runs_csv_row_holds_its_shares_and_its_verdict():
    """What watch measured and concluded is in its CSV row as in its JSON (issue 62, item 8)."""
    from tests.records import make_watch_record

    watched = make_watch_record()  # 30% of each window waiting for input: input-bound
    (row,) = csv.DictReader(io.StringIO(exporters.get("csv", "runs").runs([watched])))
    for share in ("input_wait_share", "outside_step_share", "gpu_idle_share"):
        expected = getattr(watched, share)
        assert (float(row[share]) if row[share] else None) == pytest.approx(expected), share
    assert row["verdict"] == watched.verdict[0].message and row["flags"].split(";")[0] == watched.verdict[0].code


@pytest.fixture
def tsv():
    """A new format: one class, registered; removed after the test."""

    @exporters.register
    class Tsv(base.Exporter):
        name, title, suffix = "tsv", "TSV", ".tsv"

        def runs(self, records) -> str:
            return "".join(f"{r.id}\t{r.workload}\n" for r in records)

    yield Tsv
    del base.REGISTRY["tsv"]


def test_a_new_format_is_one_module_and_every_verb_reaches_it(tsv, tmp_path):
    store = tmp_path / "s.sqlite"
    with Store(store) as s:
        for r in RECORDS:
            s.put(r)
    runner = CliRunner()
    exported = runner.invoke(app, ["results", "export", "--format", "tsv", "--store", str(store)])
    assert exported.exit_code == 0 and exported.output == "run00001\tmlp\nrun00002\tmlp\n"
    # a format that does not write comparisons or reports is refused there, with the ones that do
    refused = runner.invoke(app, ["compare", "--by", "precision", "--format", "tsv", "--store", str(store)])
    assert refused.exit_code == 2 and "choose csv, json, markdown or table" in refused.output
    refused = runner.invoke(app, ["report", "--format", "tsv", "--out", str(tmp_path / "r"), "--store", str(store)])
    assert refused.exit_code == 2 and "for a report: choose html or markdown" in refused.output
    # --markdown is --format markdown; both at once, differing, is refused
    short = runner.invoke(app, ["compare", "--by", "precision", "--markdown", "--store", str(store)]).output
    assert (
        short
        == runner.invoke(app, ["compare", "--by", "precision", "--format", "markdown", "--store", str(store)]).output
    )
    both = runner.invoke(app, ["compare", "--by", "precision", "--csv", "--format", "json", "--store", str(store)])
    assert both.exit_code == 2 and "choose one of --format, --json, --markdown and --csv" in both.output


def test_two_formats_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two exporters named 'json'"):

        @exporters.register
        class Another(base.Exporter):
            name, title, suffix = "json", "JSON", ".json"
