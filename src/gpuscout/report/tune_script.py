"""`gpuscout tune -- COMMAND` on the terminal: each change's measured gain, ranked, with the line
to write; what was not tried and why; the one-line summary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuscout.report import format as fmt
from gpuscout.tune.results import Judged, ScriptPlan, TuneScriptReport


def _gain(row: Judged) -> str:
    if row.verdict == "failed":
        return "failed"
    if row.ratio is None:
        return fmt.DASH
    interval = f" [{row.ratio_low:.2f}-{row.ratio_high:.2f}]" if row.ratio_low is not None else ""
    scaling = f"; {row.devices} devices, {row.efficiency:.0%} scaling efficiency" if row.efficiency else ""
    return f"{row.ratio:.2f}x{interval} {row.verdict or ''}".strip() + scaling


def _rate(row: Judged) -> str:
    if not row.samples_per_s:
        return fmt.DASH
    interval = f" ({fmt.number(row.ci95_low, 0)}-{fmt.number(row.ci95_high, 0)})" if row.ci95_low is not None else ""
    return f"{fmt.number(row.samples_per_s, 0)}{interval}"


def _health(row: Judged) -> str:
    if row.verdict == "failed":
        return row.failure or "failed"
    if row.changes_training:
        return f"changes the training: {row.changes_training}"
    if row.healthy is False:
        return f"not recommended: {row.health}"
    return row.note or "ok"


def _clock(row: Judged) -> str:
    """How the row's figure was read: whole epochs (an epoch's time and steps) or the windows."""
    if row.clock == "epochs" and row.epoch_s:
        return f"by whole epochs ({fmt.seconds(row.epoch_s)} an epoch of {row.epoch_steps:,} steps)"
    return "by the training steps' windows"


def _whole_fit(row: Judged) -> str:
    """The speed-up over the script's whole fit where it differs from the steady one by a tenth."""
    if not row.whole_fit_ratio or not row.ratio or abs(row.whole_fit_ratio / row.ratio - 1) < 0.1:
        return ""
    return f"; over the script's whole fit, its first epochs as they ran: {row.whole_fit_ratio:.2f}x"


# Narrower than this, the table leaves out its "on" and "input wait" columns (the change says what it
# was added to) so that 80 columns hold a row without cutting a change's name
WIDE = 110


def _table(report: TuneScriptReport, narrow: bool) -> Table:
    """Each change's row in the rounds, then the session's one figure: the final row, the chosen
    setting against the baseline between runs after the search."""
    table = Table(
        title="each change against runs of the setting it was added to, before and after it; "
        "what a round chose is kept only where later runs confirm it",
        title_justify="left",
    )
    columns = ("round", "change", "samples/s", "speed-up (95% CI)", "training")
    if not narrow:
        columns = ("round", "change", "on", "samples/s", "speed-up (95% CI)", "input wait", "training")
    for column in columns:  # a change's name folds rather than losing its end to an ellipsis
        table.add_column(
            column,
            no_wrap=column in ("round", "samples/s", "speed-up (95% CI)", "input wait"),
            overflow="fold" if column == "change" else "ellipsis",
        )
    rows = [
        (str(r.round if r.round is not None else ""), r, r.change + (" (chosen)" if r.chosen else ""), _health(r))
        for r in report.rows
    ]
    best = report.best
    if best is not None and best.confirmation:
        rows.append(("final", best, f"{best.change} ({'kept' if best.kept else 'not kept'})", _health(best)))
    for number, row, name, health in rows:
        on = row.on or "baseline"
        if row.remeasured:
            why = "the host was noisy" if row.noisy else "one run left it open"
            health += f" (measured again: {why})"
        cells = {
            "round": number,
            "change": Text(name if not narrow or on == "baseline" else f"{name} on {on}"),
            "on": Text(on),
            "samples/s": fmt.number(row.samples_per_s, 0) if row.samples_per_s else fmt.DASH,
            "speed-up (95% CI)": _gain(row),
            "input wait": fmt.percent(row.input_wait_share),
            "training": Text(health),
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def print_tune_script(report: TuneScriptReport, out: Console) -> None:
    base = report.baseline
    runs = (
        f"each over whole epochs of {report.epoch_steps:,} steps ({report.steps:,} steps or more)"
        if report.epoch_steps
        else f"each over {report.steps:,} training steps"
    )
    out.print(
        Text(
            f"tune {report.workload}: {len(report.rows)} setting(s) measured in {report.rounds} "
            f"round(s), {runs} of the unchanged script",
            style="bold",
        ),
        soft_wrap=True,
    )
    if report.no_epochs:
        out.print(
            Text(
                f"the baseline's runs count steps, judged by their windows (which leave out validation and the "
                f"epoch's end): {report.no_epochs}; a faster setting's runs train whole epochs where they fit"
            ),
            soft_wrap=True,
        )
    if report.diverged:
        d = report.diverged
        out.print(Text(f"in the unchanged script, {d.message}", style="bold red"), soft_wrap=True)
        out.print(Text(f"  seen: {d.evidence}\n  change first: {d.fix}"), soft_wrap=True)
    steps = (
        f" (the steps alone {fmt.number(base.windows_samples_per_s, 0)}/s)"
        if base.clock == "epochs" and base.windows_samples_per_s
        else ""
    )
    out.print(
        Text(
            f"baseline: {_rate(base)} samples/s {_clock(base)}{steps}, step {fmt.seconds(base.step_time_s)}, "
            f"input wait {fmt.percent(base.input_wait_share)}, GPU busy {fmt.percent(base.gpu_busy_share, 0)}"
        ),
        soft_wrap=True,
    )
    out.print(_table(report, narrow=out.width < WIDE))
    for row in report.rows:
        if row.clock_note:
            out.print(Text(f"note: {row.change}: {row.clock_note}"), soft_wrap=True)
        if row.changes_training is None and row.training_checked is False and row.verdict == "faster":
            out.print(
                Text(f"note: {row.change}: no whole epoch ran, so its steps and batches an epoch were not compared"),
                soft_wrap=True,
            )
    best, copy = report.best, report.patched
    kept = best is not None and bool(best.kept)
    out.print(
        Text(report.summary + (_whole_fit(best) if kept else ""), style="bold green" if kept else "bold"),
        soft_wrap=True,
    )
    if best is not None and not kept and best.windows_ratio is not None:
        out.print(
            Text(
                f"note: inside its runs, {best.change}'s training steps read {best.windows_ratio:.2f}x: windows "
                "and epochs of one run agree with each other far better than runs do, so they locate a cause "
                "and never decide a gain"
            ),
            soft_wrap=True,
        )
    if copy is not None:
        epoch = (
            f", {copy.epoch_steps:,} steps an epoch, {fmt.seconds(copy.epoch_s)} an epoch against the injected "
            f"changes' {fmt.seconds(best.epoch_s)}"
            if best and copy.clock == "epochs" and best.epoch_s and copy.epoch_s
            else ""
        )
        out.print(
            Text(
                f"patched copy: {_gain(copy)} {_clock(copy)}{epoch}: "
                f"{'agrees' if copy.agrees else 'does not agree'} with the injected changes"
            ),
            soft_wrap=True,
        )
    if kept and best.line:
        out.print(Text("write these lines:"), soft_wrap=True)
        for line in best.line.splitlines():  # code is never wrapped
            out.print(Text(f"    {line}", style="green"), soft_wrap=True)
    if report.left:
        out.print(Text(f"left: {report.left}", style="yellow"), soft_wrap=True)
    patch = report.patch
    if patch is not None:
        where = (
            f"the diff of {', '.join(patch.located)} is in {patch.file} (your files are unchanged)"
            if report.diff
            else f"no diff written to {patch.file}"
        )
        out.print(Text(f"patch: {where}"), soft_wrap=True)
        for name, why in patch.unlocated.items():
            out.print(Text(f"patch: {name} not located: {why}"), soft_wrap=True)
        if patch.note:
            out.print(Text(f"patch: {patch.note}", style="yellow"), soft_wrap=True)
    for skipped in report.skipped:
        out.print(Text(f"not tried: {skipped.change}: {skipped.reason}"), soft_wrap=True)
    if report.noisy:
        out.print(Text(f"note: {report.noisy}", style="yellow"), soft_wrap=True)
    out.print(
        Text(
            f"session {report.session} ({fmt.seconds(report.wall_s)}): every run is stored; "
            f"`gpuscout compare {report.baseline.run_id} RUN` compares any two"
        ),
        soft_wrap=True,
    )


def print_plan(plan: ScriptPlan, out: Console) -> None:
    """--dry-run: each change and why it applies or not, from a stored watch of the command."""
    if plan.baseline is None:
        out.print(
            Text(
                f"no stored watch of `{plan.command}`: the baseline run decides which changes apply. The "
                "changes and what makes each worth trying:"
            ),
            soft_wrap=True,
        )
        for rule in plan.rules:
            out.print(Text(f"  {rule.change}: {rule.when}"), soft_wrap=True)
        return
    out.print(Text(f"from the stored watch {plan.baseline} of `{plan.command}`:"), soft_wrap=True)
    for change in plan.changes:
        out.print(Text(f"  would try {change.change}: {change.why}  ->  {change.line.splitlines()[0]}"), soft_wrap=True)
    for skipped in plan.skipped:
        out.print(Text(f"  not {skipped.change}: {skipped.reason}"), soft_wrap=True)
    out.print(
        Text(
            "then, round after round, the changes the fastest setting's run makes worth trying on top of it, "
            "each between runs of that setting; what a round chose is kept only where runs after the search "
            "confirm it against the baseline; nothing was run"
        ),
        soft_wrap=True,
    )
