"""gpuscout where Keras users train: a live notebook kernel (or any Python process), and notebook
files run top to bottom.

- In-process: `gpuscout.watching()` and `gpuscout.callback()` (gpuscout.notebook.live), shown
  by notebook.display; `%load_ext gpuscout` gives the `%gpuscout` / `%%gpuscout` magics
  (notebook.magics); `gpuscout.show(run_id)` and `gpuscout.doctor()` here.
- A notebook file: `gpuscout watch train.ipynb` runs gpuscout.measure.notebook_runner, which runs it in a fresh
  kernel with nbclient, instrumented as a script is (measure/command.py resolves it).
"""

from __future__ import annotations

from pathlib import Path

from gpuscout.notebook.display import Shown


def show(*run_ids: str, store: str | Path | None = None, display: bool = True) -> Shown:
    """Stored runs (ids or unique prefixes) as `results show` prints them, with the HTML report's
    plots of them; displayed in the cell, and returned."""
    from gpuscout.core.errors import UsageError
    from gpuscout.notebook import display as shown
    from gpuscout.store import Store

    if not run_ids:
        raise UsageError("show which run? give its id: gpuscout.show('3fa2') (`gpuscout results list` shows them)")
    with Store(store, readonly=True) as opened:
        records = [opened.get(run_id) for run_id in run_ids]
        path = opened.path
    result = shown.stored(records, path)
    if display:
        shown.display(result)
    return result


def doctor(display: bool = True) -> Shown:
    """`gpuscout doctor`'s report of this machine (the kernel's), shown in the cell and returned."""
    from gpuscout.doctor import run_doctor
    from gpuscout.notebook import display as shown

    result = shown.doctor(run_doctor())
    if display:
        shown.display(result)
    return result


def report(store: str | Path | None = None, display: bool = True) -> Shown:
    """`gpuscout report` of the whole store, inline: the HTML report's sections with something to show."""
    from gpuscout.notebook import display as shown
    from gpuscout.report import html
    from gpuscout.report.document import build, newest_with_telemetry
    from gpuscout.store import Store

    with Store(store, readonly=True) as opened:
        records = opened.list()
        sweeps = {name: opened.trials(name) for name in opened.sweeps()}
        path = opened.path
    document = build(records, newest_with_telemetry(records), f"gpuscout report of {path}", sweeps)
    result = shown.Shown(
        f"{len(records)} run(s) and {len(sweeps)} sweep(s) in {path}: the report is HTML (Jupyter "
        "shows it; elsewhere `gpuscout report --out report.html`)",
        html.fragment(document),
    )
    if display:
        shown.display(result)
    return result


def compare(
    *run_ids: str,
    by: str | None = None,
    baseline: str | None = None,
    store: str | Path | None = None,
    display: bool = True,
) -> Shown:
    """`gpuscout compare` of stored runs (all of them when no id is given), inline: each comparison's
    table as the terminal shows it, and, for a tune session's changes (by="change"), the HTML
    report's plot of what each bought."""
    from gpuscout.analysis.compare import compare as compare_runs
    from gpuscout.comparison import Filters, select
    from gpuscout.core.errors import UsageError
    from gpuscout.notebook import display as shown
    from gpuscout.report import comparison, plots, script_plots
    from gpuscout.store import Store

    by = by or ("run" if run_ids else "gpu")
    with Store(store, readonly=True) as opened:
        records = select(opened, list(run_ids) or None, Filters())
    comparisons = compare_runs(records, by, baseline)
    if not comparisons:
        raise UsageError(
            f"nothing to compare by {by}: the selected runs ({len(records)}) do not include two groups "
            f"that differ in {by} alone; try another by= or `gpuscout results list`"
        )

    def draw(console) -> None:
        for c in comparisons:
            console.print(comparison.table(c))
            for note in c.notes:
                console.print(f"note: {note}", markup=False, highlight=False)

    text, html = shown.printed(draw)
    figures = [script_plots.tune_speedups(c) for c in comparisons] if by == "change" else []
    html += "".join(f'<figure style="margin:0">{plots.svg(f)}</figure>' for f in figures if f is not None)
    result = shown.Shown(text, html)
    if display:
        shown.display(result)
    return result
