"""The notebook pieces without a kernel: reading a notebook file, resolving it as a command, the
magics' bad input, and what a cell displays (tests/integration/test_notebook.py runs real kernels)."""

from __future__ import annotations

import json
import warnings

import nbformat
import pytest
from IPython.core.error import UsageError as IPythonUsageError

from gpuscout.core.errors import UsageError
from gpuscout.measure import command
from gpuscout.measure import notebook_runner as runner
from gpuscout.notebook import display, magics
from gpuscout.report import html
from gpuscout.report.document import build
from tests.records import make_watch_record


def notebook_file(path, kernel="python3", ids=True):
    made = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    made.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    text = nbformat.writes(made)
    if not ids:  # a 4.5 notebook written by a tool that leaves ids out: nbformat warns, Jupyter adds them
        data = json.loads(text)
        for cell in data["cells"]:
            cell.pop("id")
        text = json.dumps(data)
    path.write_text(text)
    return path


def test_a_notebook_is_read_validated_and_given_cell_ids_without_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read = runner.read(notebook_file(tmp_path / "old.ipynb", ids=False))
    assert read.cells[0].source == "x = 1" and read.cells[0].get("id")
    (tmp_path / "text.ipynb").write_text("not json")
    (tmp_path / "schema.ipynb").write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {
                        "cell_type": "code",
                        "id": "a",
                        "source": 5,
                        "metadata": {},
                        "outputs": [],
                        "execution_count": None,
                    }
                ],
            }
        )
    )
    with pytest.raises(
        ValueError, match=r"^text.ipynb is not a readable notebook \(Notebook does not appear to be JSON"
    ):
        runner.read(tmp_path / "text.ipynb")
    with pytest.raises(ValueError, match=r"^schema.ipynb is not a valid notebook: "):
        runner.read(tmp_path / "schema.ipynb")


def test_a_notebook_command_is_checked_before_anything_runs(tmp_path):
    good = notebook_file(tmp_path / "train.ipynb")
    resolved = command.resolve([str(good)])
    assert (
        resolved.argv[1:] == ["-m", "gpuscout.measure.notebook_runner", str(good.resolve())]
        and resolved.workload == "train.ipynb"
    )
    assert command.resolve(["--", str(good)][1:], verb="tune").workload == "train.ipynb"
    for given, message in (
        ([str(good), "--lr", "0.1"], "a notebook takes no arguments (--lr 0.1)"),
        ([str(tmp_path / "none.ipynb")], "none.ipynb: no such notebook"),
        (
            [str(notebook_file(tmp_path / "r.ipynb", kernel="ir"))],
            "runs on the kernel 'ir', which is not installed here",
        ),
    ):
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            command.resolve(given)


def test_the_magics_refuse_bad_input_in_one_line():
    for line, cell, message in (
        ("bogus", "x = 1", "%%gpuscout runs a cell under watch"),
        ("watch --steps 5", "x = 1", "unknown option '--steps'"),
        ("watch --store", "x = 1", "--store needs a value"),
        ("", None, "%gpuscout needs a command"),
        ("show 'unclosed", None, "cannot read `%gpuscout show 'unclosed`"),
    ):
        with pytest.raises(IPythonUsageError, match=message):
            magics.gpuscout(None, line, cell)


def test_a_watch_record_shows_as_text_and_as_html_with_its_plot(capsys):
    record = make_watch_record()
    shown = display.watched(record, "/tmp/results.sqlite")
    assert shown.text.startswith(f"{record.workload}: watched") and "verdict, ranked by" in shown.text
    assert shown.text.rstrip().endswith(f"gpuscout recommend --from {record.id}")
    assert "\x1b" not in shown.text and "<svg" in shown._repr_html_() and "verdict, ranked by" in shown.html
    display.display(shown)  # no IPython shell here: the text on stdout
    assert capsys.readouterr().out == shown.text + "\n"


def test_the_report_inside_a_cell_keeps_its_styles_to_itself_and_leaves_out_what_is_empty():
    record = make_watch_record()
    fragment = html.fragment(build([record], None))
    assert fragment.startswith('<div class="gpuscout-report"><style>') and "<script" not in fragment
    assert "Watched training scripts" in fragment and "<svg" in fragment
    assert "Inference latency" not in fragment and "Nothing stored for this yet" not in fragment
    css = fragment.split("<style>")[1].split("</style>")[0]
    assert all(rule.strip().startswith(".gpuscout-report") for rule in css.split("}") if rule.strip())


def test_a_tune_sessions_comparison_shows_inline_with_the_reports_plot(tmp_path):
    """gpuscout.compare (and `%gpuscout compare RUN RUN`): compare's table, and by change the plot
    the HTML report draws of what each change bought."""
    import gpuscout
    from gpuscout.store import Store
    from tests.records import fit_events

    store = tmp_path / "results.sqlite"
    baseline = make_watch_record("base0001", fit_events(windows=6, window_s=1.0), tune_change=None)
    faster = make_watch_record("fast0001", fit_events(windows=6, window_s=0.5), tune_change="jit_compile")
    with Store(store) as opened:
        opened.keep([baseline, faster])
    by_run = gpuscout.compare("base0001", "fast0001", store=store, display=False)
    text = " ".join(by_run.text.split())
    assert "ratio [95% CI]" in text and "│ 2.000 " in text and "cannot tell" in text
    assert "note: one run a side: its ratio is one process against another" in text
    assert "<svg" not in by_run.html
    by_change = gpuscout.compare(by="change", store=store, display=False)
    assert "jit_compile" in by_change.text and "<svg" in by_change.html
    with pytest.raises(UsageError, match="nothing to compare by backend"):
        gpuscout.compare(by="backend", store=store, display=False)
