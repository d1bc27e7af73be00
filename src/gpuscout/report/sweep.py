"""`gpuscout sweep` on the terminal: the live view of trials and the summary at the end."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from gpuscout.core.units import counted
from gpuscout.measure.plans import label
from gpuscout.record.trial import TrialOutcome
from gpuscout.report import format as fmt
from gpuscout.report import terminal
from gpuscout.report.explain import print_explanations
from gpuscout.sweep import resume_plan, stop_plan
from gpuscout.sweep.expansion import argv_for
from gpuscout.sweep.pruning import bracket_of, first_rung
from gpuscout.sweep.results import EarlyStopSummary, SweepSummary, WarmStart


class SweepView(resume_plan.Display):
    def __init__(self, progress: Progress, sweep) -> None:
        self.progress, self.sweep, self.task = progress, sweep, None
        self.running = self.failed = self.ok = self.pruned = 0

    def planned(self, total: int, todo: int, slots: int) -> None:
        self.task = self.progress.add_task("starting", total=todo)
        self.slots = slots

    def _describe(self, best: TrialOutcome | None = None) -> None:
        metric = self.sweep.metric
        partial = best is not None and best.status != "ok"
        best_text = (
            "no result yet"
            if best is None
            else f"best {metric.name} {best.metrics[metric.name]:.5g} (trial {best.index}"
            + (", timed out: its last report)" if partial else ")")
        )
        pruned = f", {self.pruned} pruned" if self.pruned else ""
        self.progress.update(
            self.task,
            description=f"{self.ok} ok{pruned}, {self.failed} failed, {self.running} running "
            f"on {self.slots} slot(s); {best_text}",
        )

    def note(self, text: str) -> None:
        self.progress.console.print(Text(f"note: {text}", style="yellow"))

    def started(self, trial, slot) -> None:
        self.running += 1
        self._describe(getattr(self, "best", None))

    def finished(self, result, best) -> None:
        self.running = max(0, self.running - 1)
        if result.status == "ok":
            self.ok += 1
        elif result.status == "pruned":  # one line: which trial stopped where, not a failure
            self.pruned += 1
            self.progress.console.print(Text(f"trial {result.index} {result.message}"), soft_wrap=False)
        elif result.status != "interrupted":
            self.failed += 1
            # the reason on the terminal, not only in the store: one line, and where the logs are
            self.progress.console.print(
                Text(
                    f"trial {result.index} {result.status} after {result.attempts} "
                    f"attempt(s): {result.message}; logs: {result.log_dir}",
                    style="red",
                ),
                soft_wrap=True,
            )
            print_explanations(self.progress.console, result.explanations, indent="  ")
        self.best = best
        self.progress.advance(self.task)
        self._describe(best)


def print_summary(summary: SweepSummary, out: Console) -> None:
    metric = summary.metric
    t = Table(
        title=escape(f"sweep {summary.sweep}: best by {metric.name} ({metric.direction})"),
        title_justify="left",
    )
    for c in ("#", "trial", metric.name, "parameters", "duration", "slot"):
        t.add_column(escape(c))
    for rank, b in enumerate(summary.best, 1):
        t.add_row(
            str(rank),
            str(b.index),
            f"{b.value:.6g}",
            escape(json.dumps(b.params)),
            fmt.seconds(b.duration_s),
            escape(b.slot),
        )
    out.print(t)
    if summary.timed_out:
        late = Table(
            title=escape(f"timed out (killed at the trial timeout): the last {metric.name} each reported"),
            title_justify="left",
        )
        for c in ("trial", metric.name, "epochs reported", "parameters", "duration", "slot"):
            late.add_column(escape(c))
        for b in summary.timed_out:
            late.add_row(
                str(b.index),
                f"{b.value:.6g} (timed out)",
                str(b.epochs),
                escape(json.dumps(b.params)),
                fmt.seconds(b.duration_s),
                escape(b.slot),
            )
        out.print(late)
    if summary.diverged:
        out.print(
            f"trial(s) {', '.join(map(str, summary.diverged))}: {metric.name} ended NaN or infinite (the "
            "training diverged): kept, not ranked",
            highlight=False,
            markup=False,
        )
    counts = summary.status_counts
    out.print(
        f"{summary.run_now} trial(s) run now ({summary.skipped_done} already done): "
        + ", ".join(f"{v} {k}" for k, v in counts.items() if v),
        highlight=False,
        markup=False,
    )
    if summary.wall_s:
        out.print(
            f"wall {fmt.seconds(summary.wall_s)} for {fmt.seconds(summary.trial_seconds_sum)} of trials: "
            f"{summary.parallel_speedup:.2f}x from running in parallel; {summary.trials_per_hour:.1f} trials/h; "
            f"{summary.gpu_hours:.3f} GPU-hours"
            + (f", {summary.cost_usd:.2f} USD" if summary.cost_usd is not None else ""),
            highlight=False,
            markup=False,
        )
    for gpu, share in summary.gpu_idle_share.items():
        out.print(
            f"{gpu} idle {fmt.percent(share)} of the wall time: {fmt.percent(summary.gpu_gap_share[gpu])} "
            f"between trials, {fmt.percent(summary.gpu_drain_share[gpu])} at the end with no trial left",
            highlight=False,
            markup=False,
        )
    stopping = summary.early_stop
    if stopping:
        for line in stopping_lines(stopping, summary.cost_usd, summary.metric.name):
            out.print(line, highlight=False, markup=False)
    cache = summary.compilation_cache
    if cache and cache.programs:  # workload trials on jax count what the cache gave them
        out.print(
            f"compiled programs: {cache.hits} of {cache.programs} loaded from the sweeps' cache "
            f"({cache.folder}), the others compiled",
            highlight=False,
            markup=False,
        )
    for line in warm_lines(summary.warm_start):
        out.print(line, highlight=False, markup=False)
    if summary.stopped:
        out.print(f"[red]stopped early[/]: {escape(summary.stopped)}", highlight=False)
    board = summary.tensorboard.note if summary.tensorboard else "none"
    out.print(f"logs: {summary.log_root}; TensorBoard: {board}", highlight=False, markup=False)
    for note in summary.notes:
        out.print(f"note: {note}", highlight=False, markup=False)


def warm_lines(warm: WarmStart | None) -> list[str]:
    """How the command trials started (sweep file: `warm_start`)."""
    if not warm:
        return []
    imported = ", ".join(warm.imported) or "nothing yet"
    lines = [
        f"warm starts: {warm.trials} of {warm.of} trials forked from an interpreter that imported "
        f"{imported} once (in {warm.ready_s:.1f} s)"
    ]
    return lines + [f"warm starts refused, those trials started cold: {why}" for why in warm.refused]


@contextlib.contextmanager
def sweep_view(sweep, quiet: bool = False) -> Iterator[SweepView]:
    """The live view on stderr, cleared at the end when `quiet` (--json)."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=terminal.console(stderr=True),
        transient=quiet,
    ) as progress:
        yield SweepView(progress, sweep)


def _command(plan: resume_plan.Plan, trial) -> str | None:
    """What the trial runs: its command line, or the benchmark run a workload trial is."""
    if plan.sweep.command is not None:
        return shlex.join(argv_for(plan.sweep, trial.params))
    spec = plan.specs.get(trial.key)
    return f"a gpuscout bench run: {label(spec)}" if spec is not None else None


def print_trials(plan: resume_plan.Plan, as_json: bool) -> None:
    """--dry-run: the trials, which are done, and what each runs; a new tpe sweep's first proposals."""

    stop = plan.sweep.early_stop

    def item(t, state: str, done: bool) -> dict:
        entry = {
            "index": t.index,
            "key": t.key,
            "params": t.params,
            "done": done,
            "state": state,
            "command": _command(plan, t),
        }
        if stop is not None and stop.kind == "hyperband":  # which rung it is first judged at
            bracket = bracket_of(t.index, stop.brackets, stop.reduction_factor)
            entry["bracket"] = {
                "of": stop.brackets,
                "bracket": bracket + 1,
                "judged_from_epoch": first_rung(stop, bracket),
            }
        return entry

    listing = [item(t, plan.states.get(t.key, "not run yet"), t not in plan.todo) for t in plan.trials]
    first = [item(t, "proposed first, before any result", False) for t in plan.preview]
    tpe = plan.sweep.strategy.kind == "tpe"
    total = plan.sweep.strategy.trials if tpe else len(plan.trials)
    stopping = None
    if stop is not None:
        indexes = list(range(total)) if tpe else [t.index for t in plan.trials]
        params = [t.params for t in [*plan.trials, *plan.preview]]
        stopping = stop_plan.plan(stop, indexes, params, plan.sweep.metric.name)
    if as_json:
        document = {"sweep": plan.sweep.name, "slots": [s.label for s in plan.slots], "trials": listing}
        extra = {"early_stopping": dataclasses.asdict(stopping) if stopping else None}
        typer.echo(json.dumps({**document, "first_proposals": first, **extra, "notes": plan.notes}, indent=2))
        return
    out = terminal.console(highlight=False)
    left = total - len(plan.trials) + len(plan.todo) if tpe else len(plan.todo)
    slots = ", ".join(s.label for s in plan.slots)
    out.print(f"sweep {plan.sweep.name}: {counted(total, 'trial')}, {left} to run on {slots}", markup=False)
    for note in plan.notes:
        out.print(f"note: {note}", markup=False)
    if tpe:
        out.print(
            f"strategy tpe: {counted(total, 'trial')} in all, each proposed by the sampler from "
            "the results before it"
            + (
                f"; the first {len(first)}, one a slot, start before any result:"
                if first
                else " (those listed are the ones already stored)"
            ),
            markup=False,
        )
    for entry in first or listing:
        state, bracket = entry["state"], entry.get("bracket")
        if bracket:
            state += (
                f"; bracket {bracket['bracket']} of {bracket['of']}, judged from epoch {bracket['judged_from_epoch']}"
            )
        out.print(f"  {entry['index']:4} {json.dumps(entry['params'])}  ({state})", markup=False)
        if entry["command"]:
            out.print(f"       {entry['command']}", markup=False, soft_wrap=True)
    for line in stop_plan_lines(stopping) if stopping else ():
        out.print(line, markup=False)
    out.print("nothing was run (--dry-run)", markup=False)


# A hyperband bracket's trials named before "and N more": a line, not a page, for a sweep of hundreds
NAMED_TRIALS = 12


def stop_plan_lines(plan: stop_plan.StopPlan) -> list[str]:
    """The early-stopping plan as --dry-run says it: the rule, then at which epochs how many trials
    are judged and how many go on, then which trials each hyperband bracket holds."""
    lines = [f"early stopping ({plan.kind}): {plan.rule}"]
    if plan.rungs:
        width = len(str(plan.rungs[-1].epoch))
        end = f" (epoch {plan.epochs})" if plan.epochs else ""
        for r in plan.rungs:
            if r.reach == 1:
                went = f"it runs to the end{end}"
            elif r.go_on == r.reach:
                last = r is plan.rungs[-1] and not plan.more_rungs
                went = f"too few to judge (fewer than {plan.factor}): " + (
                    f"they run to the end{end}" if last else "all go on"
                )
            else:
                went = f"the best {r.go_on} go on" if r.go_on != 1 else "the best one goes on"
            if plan.brackets and r.go_on != r.reach:  # hyperband: later brackets run on unjudged past early rungs
                joining = f" ({r.joining} of them for the first time)" if r.joining else ""
                reach = f"{counted(r.reach, 'trial')} judged{joining}"
            else:
                reach = counted(r.reach, "trial") + (" reaches it" if r.reach == 1 else " reach it")
            lines.append(f"  epoch {r.epoch:>{width}}: {reach}, {went}")
        if plan.more_rungs:
            lines.append("  ... and on, each rung the last times the factor, as far as the trials run")
        lines.append("  (counts as the synchronous schedule leaves them; trials are judged again as peers arrive)")
    elif plan.epochs is not None:
        lines.append(f"  first judged at epoch {plan.first_judged_epoch} of {plan.epochs}")
    for b in plan.brackets:
        shown = ", ".join(map(str, b.trials[:NAMED_TRIALS])) or "none"
        trials = shown + (f" and {len(b.trials) - NAMED_TRIALS} more" if len(b.trials) > NAMED_TRIALS else "")
        lines.append(f"  bracket {b.bracket}, judged from epoch {b.judged_from_epoch}: trials {trials}")
    return lines


def stopping_lines(stopping: EarlyStopSummary, cost_usd: float | None, metric: str) -> list[str]:
    """What early stopping decided and saved: the slot time used against running every trial to
    its end (estimated from each pruned trial's pace), the epochs against the synchronous
    schedule's, the best trial's rank at each rung, and how likely a pruned trial was to win."""
    used_h = stopping.trial_hours_used
    full_h = used_h + stopping.trial_hours_saved
    share = f" ({used_h / full_h:.2f}x)" if full_h else ""
    money = f", {cost_usd:,.2f} $ of an estimated {cost_usd * full_h / used_h:,.2f} $" if cost_usd and used_h else ""
    sync = stopping.epochs_synchronous
    lines = [
        f"early stopping ({stopping.kind}): {counted(stopping.pruned, 'trial')} pruned; "
        f"{fmt.seconds(used_h * 3600)} of slot time used of an estimated {fmt.seconds(full_h * 3600)} to run "
        f"every trial to its end{share}{money}; {stopping.epochs_run:,} of {stopping.epochs_planned:,} "
        f"epochs run" + (f" (synchronous {stopping.kind.replace('_', ' ')}: {sync:,})" if sync else "")
    ]
    if stopping.brackets:
        held = [b for b in stopping.brackets if b.trials]
        said = [f"{counted(b.trials, 'trial')} judged from epoch {b.judged_from_epoch}" for b in held]
        lines.append("brackets: " + ", ".join(said))
    ranks = ", ".join(f"{r.rank} of {r.of} at epoch {r.epoch}" for r in stopping.best_rank_at_rungs)
    if ranks:
        lines.append(f"the best trial ranked {ranks}")
    won = stopping.pruned_could_win
    if won and won.share is None:  # one curve: a count, never a chance
        lines.append(
            f"a pruned trial's chance to have won cannot be told from one curve: the one finished trial that stood "
            f"as low at epoch {won.epoch} {'still ended' if won.won else 'did not end'} within the winner's "
            f"noise ({metric} +-{won.noise:.3g})"
        )
    elif won:
        lines.append(
            f"a pruned trial's chance to have won: at most {won.won} of the {won.of} finished trials that stood "
            f"as low at epoch {won.epoch} still ended within the winner's noise ({metric} +-{won.noise:.3g}): "
            f"{won.share:.0%} (95% CI {won.share_low:.0%}-{won.share_high:.0%})"
        )
    elif stopping.pruned:  # said, not left out: the user may trust silence
        which = (
            "the one trial that ran to the end did not stand"
            if stopping.finished == 1
            else f"none of the {counted(stopping.finished, 'trial')} that ran to the end stood"
        )
        lines.append(
            f"a pruned trial's chance to have won cannot be told: {which} as low as a pruned one where it was stopped"
        )
    return lines
