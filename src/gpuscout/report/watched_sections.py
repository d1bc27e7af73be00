"""The report's sections of the user's own scripts: what `watch` saw of each script, and what each
`tune -- COMMAND` session's changes bought. Built for a store of hundreds of runs (issue 78: one
afternoon's store made a report of 2.1 MB with 41 timelines, tune's variants named by run id):

- Grouped by script, a summary row each first; then every run, a row each (sortable, filtered).
- A timeline only for each script's newest watched run (at most TIMELINES scripts, the newest),
  not for every run; the runs a tune session made are its variants, read in the tune section.
- A tune session: its changes, each named by what it changed, as speed-ups on a linear axis around
  1.0 with the interval drawn; at most TUNE_CHARTS sessions drawn (the newest), every session a row.
"""

from __future__ import annotations

from gpuscout.core.units import counted
from gpuscout.record.watch import WatchRecord
from gpuscout.report import format as fmt
from gpuscout.report import script_plots
from gpuscout.report.sections import Section, TableData
from gpuscout.tune.results import Judged

# How many scripts get a timeline, and how many tune sessions a chart: each figure is ~25 KB of SVG
# and a screen of scrolling; past these a table row says what a figure would (`gpuscout report
# RUN_ID` draws any run's own)
TIMELINES = 12
TUNE_CHARTS = 12


def tune_groups(records: list[WatchRecord]) -> set[str]:
    """The group ids of tune sessions: a session's baseline runs carry no change, its other runs
    do, and all share the session's group id."""
    return {r.group_id for r in records if r.tune_change is not None}


def watched(records: list[WatchRecord]) -> Section:
    """Each watched script: a summary row, its newest run's timeline, then every run a row. A run
    that ended well but called no fit (`watch -- python -c "print()"`) has nothing to show: it is
    counted, not given rows (issue 87: five such runs were five junk rows); a run that failed
    before its fit is a finding and keeps its row."""
    idle = [r for r in records if r.ok and not r.fits]
    records = [r for r in records if not (r.ok and not r.fits)]
    section = Section(
        "watched",
        "Watched training scripts",
        [
            "`gpuscout watch`: the user's own script, each Model.fit timed window by window (about a "
            "second each) and its GPUs sampled by NVML; the verdict ranks what slowed it. Its throughput "
            "is its whole epochs' (validation and callbacks in: what the script's own clock reads); the "
            "steps' own figure leaves them out."
        ],
    )
    sessions = tune_groups(records)
    by_script: dict[str, list[WatchRecord]] = {}
    for r in sorted(records, key=lambda r: r.created_utc, reverse=True):
        by_script.setdefault(r.workload, []).append(r)
    section.summary.append(_scripts(by_script, sessions))
    plain = {name: [r for r in runs if r.group_id not in sessions] for name, runs in by_script.items()}
    newest = sorted((runs[0] for runs in plain.values() if runs), key=lambda r: r.created_utc, reverse=True)
    for r in newest[:TIMELINES]:
        section.figures.append(
            (f"{r.workload}: its newest watched run ({r.id})", lambda r=r: script_plots.watch_timeline(r))
        )
    left = len(newest) - TIMELINES
    section.text.append(
        "A timeline for each script's newest watched run"
        + (f" (the newest {TIMELINES} scripts; {counted(left, 'script')} more in the tables)" if left > 0 else "")
        + "; every run is a row below, and `gpuscout report RUN_ID` draws any run's own."
    )
    section.tables.append(_runs(records, sessions))
    if idle:
        section.text.append(
            f"{counted(len(idle), 'run')} whose command called no Keras fit (nothing to time) "
            f"{'is' if len(idle) == 1 else 'are'} left out of these tables; `gpuscout results list --kind watch` "
            "lists every run."
        )
    section.text.append(
        "Beside each script's newest watched run, `gpuscout recommend --from RUN` with the catalog's "
        "prices: the cheapest GPU for its whole training and the fastest one, predicted from where its "
        "step time went (the GPU-busy share scales with the GPU; input wait and host time do not)."
    )
    section.tables.append(_recommended(newest))
    return section


def _scripts(by_script: dict[str, list[WatchRecord]], sessions: set[str]) -> TableData:
    rows = []
    for name, runs in by_script.items():
        newest = runs[0]
        rates = [r.samples_per_s for r in runs]
        best = max((v for v in rates if v is not None), default=None)
        rows.append(
            [
                name,
                str(len(runs)),
                str(len({r.group_id for r in runs if r.group_id in sessions})),
                newest.created_utc[:16].replace("T", " "),
                newest.gpu_label,
                fmt.number(best),
                newest.verdict[0].message if newest.verdict else fmt.DASH,
            ]
        )
    headers = ["script", "runs", "tune sessions", "newest (UTC)", "GPU", "best samples/s", "newest run's first cause"]
    return TableData("watched-scripts", headers, rows)


def _runs(records: list[WatchRecord], sessions: set[str]) -> TableData:
    rows = []
    for r in sorted(records, key=lambda r: (r.workload, r.created_utc)):
        t = r.telemetry
        rows.append(
            [
                r.id,
                r.created_utc[:19],
                r.workload,
                r.tune_change or ("baseline" if r.group_id in sessions else "watch"),
                r.gpu_label,
                r.status,
                str(r.batch_size or fmt.DASH),
                fmt.seconds(r.step_time_s),
                fmt.number(r.clock.samples_per_s if r.clock else None),
                fmt.number(r.windows_samples_per_s),
                fmt.percent(r.input_wait_share),
                fmt.DASH if t is None or t.gpu_util_mean_pct is None else f"{t.gpu_util_mean_pct:.0f}%",
                r.verdict[0].message if r.verdict else fmt.DASH,
            ]
        )
    headers = [
        "id",
        "created (UTC)",
        "script",
        "run (watch, or tune's change)",
        "GPU",
        "status",
        "batch",
        "step",
        "samples/s by whole epochs",
        "the steps' samples/s",
        "input wait",
        "GPU busy",
        "first cause",
    ]
    return TableData("watched-runs", headers, rows)


def _recommended(records: list[WatchRecord]) -> TableData:
    from gpuscout import catalog as catalog_lib
    from gpuscout.catalog.pricing import PricingOptions
    from gpuscout.core.errors import UsageError
    from gpuscout.recommend import from_run
    from gpuscout.recommend.ranking import Constraints

    cat = catalog_lib.load(None)
    rows = []
    for r in records:
        try:
            answer = from_run.recommendation(r, cat, Constraints(), PricingOptions())
        except UsageError as exc:
            rows.append([r.id, r.workload, str(exc), fmt.DASH, fmt.DASH, fmt.DASH])
            continue
        m = answer.measured
        split = (
            fmt.DASH
            if m.split is None
            else f"GPU {m.split.gpu_share:.0%} / input {m.split.input_share:.0%} / host {m.split.host_share:.0%}"
        )
        timed = [row for row in answer.rows if row.fits and row.throughput is not None]
        priced = [row for row in timed if row.cost_usd is not None]
        cheapest = min(priced, key=lambda row: row.cost_usd, default=None)
        fastest = max(timed, key=lambda row: row.throughput.throughput, default=None)
        rows.append([r.id, r.workload, split, _choice(cheapest), _choice(fastest), answer.fix_first or fmt.DASH])
    return TableData(
        "watched-recommend", ["id", "script", "step (measured)", "cheapest to train", "fastest", "fix first"], rows
    )


def _choice(row) -> str:
    if row is None:
        return fmt.DASH
    t = row.throughput
    spent = f", {fmt.seconds(row.hours * 3600)}" if row.hours is not None else ""
    cost = f", {fmt.usd(row.cost_usd)}" if row.cost_usd is not None else ""
    return f"{row.gpus}x {row.gpu.name}: {fmt.number(t.throughput)} samples/s ({t.basis}){spent}{cost}"


def tune_sessions(watched: list[WatchRecord], decided: dict[str, Judged]) -> Section | None:
    """Each `tune -- COMMAND` session: a row with its best change, and (the newest TUNE_CHARTS) a
    chart of what each change bought, as `compare --by change` computes it. `decided`: by session,
    the best setting its saved report holds: its figure is the one confirmed between runs after the
    search, the same the terminal, --json and MLflow showed, in the row and on its bar."""
    from gpuscout.analysis.compare import compare

    sessions = tune_groups(watched)
    variants = [r for r in watched if r.group_id in sessions]
    if not variants:
        return None
    began = {}
    for r in variants:
        began[r.group_id] = min(began.get(r.group_id, r.created_utc), r.created_utc)
    comparisons = compare(variants, "change")
    comparisons.sort(key=lambda c: began.get(c.held.get("tune session", ""), ""), reverse=True)
    section = Section(
        "tune",
        "What each change bought (gpuscout tune -- COMMAND)",
        [
            "Each change applied to the unchanged script, against the session's baseline: the "
            "speed-up of each run's figure (its whole epochs where every run has them, else its "
            "windows' median), its 95% interval between runs and the significance test of "
            "`gpuscout compare --by change` (one run against the baseline's repeated runs). "
            "The setting a session kept, or chose and did not keep, is read as the session decided it: "
            "its runs after the search against the baseline's, alternating. "
            "The bars start at 1.0, the baseline: right of it faster, left of it slower."
        ],
    )
    rows = []
    for index, c in enumerate(comparisons):
        session = c.held.get("tune session", "")
        when = began.get(session, "")[:16].replace("T", " ")
        final = decided.get(session)
        if final is not None:
            _as_decided(c, final)
        if index < TUNE_CHARTS:
            caption = f"{c.workload}: tune session {session}, {when} UTC"
            section.figures.append((caption, lambda c=c: script_plots.tune_speedups(c)))
        changes = [g for g in c.groups[1:] if g.ratio is not None]
        best = next((g for g in changes if final is not None and g.label.startswith(_setting(final))), None) or max(
            changes, key=lambda g: g.ratio, default=None
        )
        rows.append(
            [
                session,
                when,
                c.workload,
                str(len(changes)),
                best.label if best else fmt.DASH,
                script_plots.ratio_said(best) if best else fmt.DASH,
                best.verdict if best else fmt.DASH,
            ]
        )
    if len(comparisons) > TUNE_CHARTS:
        section.text.append(
            f"Charts for the newest {TUNE_CHARTS} sessions; {counted(len(comparisons) - TUNE_CHARTS, 'session')} "
            "more in the table."
        )
    headers = ["session", "began (UTC)", "script", "changes", "best change", "speed-up [95% CI]", "verdict"]
    section.summary.append(TableData("tune-sessions", headers, rows))
    return section


def _setting(final: Judged) -> str:
    """The name the session's runs of its best setting carry (a combined setting's joined names)."""
    return final.setting or final.change


def _as_decided(comparison, final: Judged) -> None:
    """The best setting's group of a session's comparison given the session's own figure: the
    ratio and interval between its runs after the search and the baseline's, and its decision."""
    name = _setting(final)
    group = next((g for g in comparison.groups[1:] if g.label == name), None)
    if group is None or final.ratio is None:
        return
    group.ratio, group.ratio_low, group.ratio_high = final.ratio, final.ratio_low, final.ratio_high
    group.p_value, group.test = final.p_value, final.test
    group.verdict = final.verdict or group.verdict
    group.label = f"{name} ({'kept' if final.kept else 'not kept'})"
