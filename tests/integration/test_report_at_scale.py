"""`gpuscout report` on a store of a few hundred runs (issue 78: one afternoon's store made 2.1 MB,
41 timelines, tune's variants named by run id, its speed-ups on log ticks with bars from the left
edge, and matplotlib's "More than 20 figures" warning): grouped by script, summaries first, a
bounded number of figures, variants named by change, speed-ups on a linear axis around 1.0, a
bounded size, nothing on stderr but the one line, and it opens in a real browser."""

from __future__ import annotations

import re

import pytest

from gpuscout.report import plots, script_plots
from gpuscout.report.watched_sections import TIMELINES, TUNE_CHARTS
from gpuscout.store import Store
from tests.cli_checks import opened_in_browser
from tests.conftest import run_cli
from tests.records import fit_events, make_record, make_watch_record

SCRIPTS = 20  # each watched 5 times, and 15 tune sessions of 1 + 5 changes, 3 baselines each
CHANGES = ("xla", "mixed_precision", "steps_per_execution_8", "cache", "workers_4_threads")
# The whole report's bound: 41 runs made 2.1 MB before; 250 runs and their figures stay under it
MOST_BYTES = 2_000_000


def _at(record, run_id: str, when: int, **update):
    """A copy of `record` as another run: its id, its minute of the day, and what `update` sets."""
    created = f"2026-12-05T{when // 60 % 24:02d}:{when % 60:02d}:00+00:00"
    return record.model_copy(update={"id": run_id, "created_utc": created, **update})


def big_store(path) -> int:
    slow = make_watch_record("tmpl0001", events=fit_events(wait_s=0.4))
    fast = make_watch_record("tmpl0002", events=fit_events(wait_s=0.05, window_s=0.8))
    slower = make_watch_record("tmpl0003", events=fit_events(wait_s=0.6, window_s=1.3))
    records, minute = [], 0
    for s in range(SCRIPTS):
        script = f"train_{s:02d}.py"
        for k in range(5):
            minute += 1
            records.append(_at(slow, f"w{s:02d}{k}0000000", minute, workload=script, group_id=f"g{s}w{k}"))
        if s < 15:
            session = f"t{s:02d}session"
            for k in range(3):
                minute += 1
                records.append(_at(slow, f"b{s:02d}{k}0000000", minute, workload=script, group_id=session))
            for c, change in enumerate(CHANGES):
                minute += 1
                made = fast if c % 2 == 0 else slower
                records.append(
                    _at(made, f"c{s:02d}{c}0000000", minute, workload=script, group_id=session, tune_change=change)
                )
    for i in range(40):  # benchmark runs: four configurations of two workloads, ten runs each
        minute += 1
        run = make_record(f"bench{i:07d}", "mlp" if i % 2 else "cnn", 100.0 + i, batch_size=32 * (1 + i % 4))
        records.append(_at(run, run.id, minute))
    with Store(path) as store:
        store.put_many(records)
    return len(records)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    stored = big_store(folder / "results.sqlite")
    out = folder / "report.html"
    proc = run_cli("report", "--out", str(out), "--store", str(folder / "results.sqlite"), timeout=900)
    return proc, out, stored, folder


def test_a_report_of_hundreds_of_runs_is_grouped_bounded_and_quiet(report):
    proc, out, stored, _ = report
    assert proc.returncode == 0, proc.stderr[-3000:]
    # nothing but the one line it wrote: no matplotlib warning of more than 20 open figures
    assert proc.stderr.strip().splitlines() == [f"wrote {out} ({stored} runs)"], proc.stderr[-3000:]
    html = out.read_text()
    assert len(html.encode()) < MOST_BYTES, len(html.encode())
    # a summary row a script, before the timelines; a timeline only for the newest TIMELINES scripts
    watched = html[html.index('<section id="watched">') : html.index("</section>", html.index('id="watched"'))]
    assert watched.index('id="watched-scripts"') < watched.index("<figure")
    assert len(re.findall(r"<tr><td>train_\d\d\.py</td>", watched)) == SCRIPTS
    assert watched.count("<figure") == TIMELINES and "8 scripts more in the tables" in watched
    # the newest script's newest plain run has its timeline; no tune variant has one
    assert "train_19.py: its newest watched run (w1940000000)" in watched
    assert not re.search(r"<figcaption>[^<]*\((?:b|c)\d{2}\d0000000\)", watched)
    # the tune section: every session a row, charts for the newest TUNE_CHARTS, each bar named by its change
    tune = html[html.index('<section id="tune">') : html.index("</section>", html.index('id="tune"'))]
    assert tune.count("<figure") == TUNE_CHARTS and tune.count("<tr><td>t") == 15
    assert "3 sessions more in the table" in tune
    assert all(f"{change} (" in tune for change in CHANGES)
    # each watched run a row, named by its change or as a baseline
    runs = html[html.index('id="watched-runs"') : html.index("</table>", html.index('id="watched-runs"'))]
    assert runs.count("<td>baseline</td>") == 45 and runs.count("<td>xla</td>") == 15
    # the newest 40 runs' whole records, and where the rest are
    assert html.count("<details><summary>") == 40 and f"{stored - 40} older runs" in html


def test_a_speed_up_chart_is_linear_around_one_with_bars_from_the_baseline():
    from gpuscout.analysis.compare import Comparison, Group

    groups = [
        Group("baseline", ["a"], [100.0], 100.0, 95.0, 105.0),
        Group("xla", ["b"], [150.0], 150.0, 140.0, 160.0, ratio=1.5, ratio_low=1.4, ratio_high=1.6, verdict="faster"),
        Group("cache", ["c"], [76.0], 76.0, 70.0, 80.0, ratio=0.76, ratio_low=0.7, ratio_high=0.8, verdict="slower"),
    ]
    fig = script_plots.tune_speedups(Comparison("train.py", "samples/s", "change", {"tune session": "t"}, 1, groups))
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"
    bars = sorted(ax.patches, key=lambda b: b.get_width())
    # 0.76x: a bar from 1.0 leftwards, to 0.76; 1.5x: from 1.0 to 1.5
    assert [round(b.get_x(), 6) for b in bars] == [1.0, 1.0]
    assert [round(b.get_x() + b.get_width(), 6) for b in bars] == [0.76, 1.5]
    low, high = ax.get_xlim()
    assert low < 0.7 and high > 1.6 and low < 1.0 < high
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["cache (0.76x [0.70–0.80])", "xla (1.50x [1.40–1.60])"]
    plots.svg(fig)  # renders, and closes it


def test_the_big_report_renders_in_a_headless_browser(report):
    _, out, _, folder = report
    plots_drawn, _ = opened_in_browser(out, folder / "profile", budget_ms=8000)
    assert plots_drawn >= TIMELINES + TUNE_CHARTS
