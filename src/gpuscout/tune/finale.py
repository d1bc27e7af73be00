"""After the search: the chosen setting confirmed or not against the baseline between runs made
after its choice (tune/confirm.py), the patched copy beside them where it is confirmed, and the
session's report, whose one figure (the table's final row, the summary, --json, the saved report,
the HTML report and MLflow) is that confirmation's."""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import dataclass

from gpuscout.analysis.between_runs import BY_EPOCHS, RunTest, pooled_test
from gpuscout.core.provenance import utc_now
from gpuscout.executor import scratch
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import confirm, judging
from gpuscout.tune import patch as patches
from gpuscout.tune.budget import Budget, Steps
from gpuscout.tune.remainder import left
from gpuscout.tune.results import Judged, PatchMade, Skipped, TuneScriptReport
from gpuscout.tune.trials import Config, Outcome

# Verdicts of a change that bought nothing: its advice is not given again in what is left
NOT_FASTER = ("slower", "no significant difference")


@dataclass
class Final:
    """The runs after the search: the baseline's the best is set against (warm ones: never the cold
    probe), the confirmation between runs, and the patched copy."""

    baseline: list[WatchRecord]
    confirmed: confirm.Confirmed | None = None
    copy: WatchRecord | None = None
    patch: patches.Patch | None = None
    copy_note: str | None = None

    @property
    def best(self) -> WatchRecord | None:
        """The chosen setting's latest run after its choice."""
        return self.confirmed.best[-1] if self.confirmed and self.confirmed.best else None


def measure(run, found: Outcome, session, budget: Budget, steps: Steps) -> Final:
    """Nothing chosen: the baseline once more, where the budget holds it (whether the host
    drifted). A setting chosen: confirmed or not between runs made after its choice, the baseline
    and it alternately (tune/confirm.py), and with --patch, where it is confirmed, the patched copy
    (the diff is still written where the budget ends first, and the report says it was not run)."""
    base_s = budget.cost("baseline", steps.base)
    if not found.path:
        warm = confirm.warm_baselines(found)
        closing = [run(Config(), "baseline again", steps.base)] if budget.allows([base_s]) else []
        return Final(baseline=(warm + closing) or [session.probe])
    best_steps = found.path[-1].steps
    best_s = budget.cost(found.best.name, best_steps)
    copy = session.patch is not None
    batch = session.probe.batch_size if session.probe else None
    checked = confirm.confirm(
        run, found, budget, steps.base, best_steps, batch, [best_s] * copy, beside=confirm.repeated(found)
    )
    final = Final(
        baseline=checked.baseline or confirm.warm_baselines(found) or [found.path[0].beside[-1]], confirmed=checked
    )
    if copy and checked.confirmed:
        final.patch, final.copy, final.copy_note = _patched_copy(session, found, run, best_steps, budget, best_s)
    return final


def _patched_copy(session, found: Outcome, run, count: int, budget: Budget, cost_s: float):
    """The diff of the best setting, and a run of the script's copy with it applied (no change
    injected): what a user who applies the patch gets; run where the budget holds it (`cost_s`)."""
    changes = list(found.best.changes)  # a batch kept twice: the later one only (ChangeKind.repeatable)
    root = session.root
    made = patches.make(changes, session.probe, root)
    if not made.texts:
        return made, None, "no change could be located in the source: the lines to write are printed"
    if session.script is None:
        return made, None, "the command is a shell line: the patched copy was not run (apply the diff and rerun)"
    if not budget.allows([cost_s]):
        return made, None, "the patched copy was not run: the --budget-minutes was spent (apply the diff and run it)"
    into = scratch.make("tunepatch")
    try:
        patches.overlay(made, root, into)
        record = run(Config(), "patched copy", count, command=session.copied(into))
        note = (
            None
            if not made.unlocated
            else f"the copy lacks {', '.join(made.unlocated)} (not located): its speed-up is of the rest"
        )
        return made, record, note
    finally:
        shutil.rmtree(into, ignore_errors=True)


def report(
    session, found: Outcome, final: Final, probe: WatchRecord, steps: Steps, records: list[WatchRecord], budget: Budget
) -> TuneScriptReport:
    batch = probe.batch_size
    checked = final.confirmed
    confirmed = checked is not None and checked.confirmed
    for t in found.path:  # a change is kept only where the runs after the search confirm it
        t.row.kept = confirmed
    rows = [t.row for t in sorted(found.trials, key=lambda t: (t.round, -(t.row.ratio or 0)))]
    best = _best(found, checked, batch)
    copy = _copy(found, final, checked, batch) if best and final.copy else None
    if copy is not None:
        apart = _disagreement(best, copy, drift([r for r in records if r is not final.copy]))
        copy.agrees = apart is None
        if apart and not final.copy_note:
            final.copy_note = f"the patched copy does not do what the injected changes did: {apart}"
    if session.patch is not None and checked is not None and not confirmed:
        final.copy_note = f"no diff: {found.best.name} was {checked.verdict}, so nothing is handed over"
    kept = found.best.knobs if confirmed else set()  # a pair kept (search._pairs) names both its knobs
    not_faster = tuple(t.change.name for t in found.trials if t.row.verdict in NOT_FASTER)
    if checked is not None and checked.verdict == confirm.NOT_CONFIRMED:
        not_faster += (found.best.name,)
    warm = final.baseline
    first, last = (warm[-2], warm[-1]) if len(warm) > 1 else (warm[-1], warm[-1])
    return TuneScriptReport(
        session=session.context.group_id,
        created_utc=utc_now(),
        command=session.command.given,
        workload=session.command.workload,
        steps=steps.base,
        epoch_steps=None if session.no_epochs else steps.epoch,
        no_epochs=session.no_epochs,
        baseline=judging.row(None, probe, probe),
        baseline_again=judging.row(None, last, first),
        noisy=confirm.spread_note(checked, batch)
        if checked and len(checked.baseline) > 1
        else judging.noisy(first, last),
        rows=rows,
        # the script's own training diverged: what every speed figure then measures is said first
        diverged=next((c for c in probe.verdict if c.code == "loss_not_finite"), None),
        path=[t.change.name for t in found.path] if confirmed else [],
        chosen=[t.change.name for t in found.path],
        rounds=found.rounds,
        best=best,
        patched=copy,
        patch=PatchMade(
            file=str(session.patch),
            located=final.patch.located,
            unlocated=final.patch.unlocated,
            note=final.copy_note,
        )
        if final.patch is not None
        else PatchMade(file=str(session.patch), located=[], unlocated={}, note=final.copy_note)
        if session.patch is not None and found.path
        else None,
        diff=final.patch.diff(session.root) if final.patch is not None else None,
        skipped=[Skipped(change=s.knob, reason=s.reason) for s in found.skipped],
        summary=summary(found, best, checked),
        left=left(
            final.best if confirmed else None,
            probe,
            kept,
            not_faster,
            {
                **{s.knob: f"not tried: {s.reason}" for s in found.skipped},
                **{
                    t.change.knob: f"not kept: {t.change.name} changes the training ({t.row.changes_training})"
                    for t in found.trials
                    if t.row.changes_training
                },
            },
        ),
        wall_s=time.monotonic() - budget.started,
        run_ids=[r.id for r in records],
    )


def drift(records: list[WatchRecord]) -> float:
    """How far apart two runs of one setting land on this host: for each setting the session ran
    more than once at one count (a reference beside its candidates, the baseline before and after),
    its runs' half-range over their mean; the median of those (0 with none). On an H200 the runs of
    one cached generator setting spread 63-75 ms an epoch over three minutes (docs/benchmarks.md):
    two figures minutes apart agree within that, however tight each run's own interval."""
    groups: dict[tuple, list[float]] = {}
    for r in records:
        rate = judging.figure(r)[0] if r.ok and r.main else None
        if rate:
            groups.setdefault((r.tune_change, r.main.steps), []).append(rate)
    spreads = sorted((max(g) - min(g)) / (max(g) + min(g)) for g in groups.values() if len(g) > 1)
    return statistics.median(spreads) if spreads else 0.0


def _best(found: Outcome, checked: confirm.Confirmed | None, batch: int | None) -> Judged | None:
    """The chosen setting's row: its runs after the choice against the baseline's beside them, the
    speed-up and its interval those runs' test (the one figure of the session: table, summary,
    JSON, report and MLflow); the windows' and epochs' pooled figures stay beside it as diagnosis.
    Where no run of it could be made after the choice, its round's row, said undecided."""
    if checked is None:
        return None
    if not checked.best:
        row = found.path[-1].row.model_copy()
        return row.set(kept=False, confirmation=confirm.explained(checked))
    row = judging.judged(found.best.as_change(), checked.best, checked.baseline, batch, found.best.settings)
    row.set(kept=checked.confirmed, chosen=True, setting=found.best.name, confirmation=confirm.explained(checked))
    return _between_runs(row, checked.tested, checked.basis)


def _copy(found: Outcome, final: Final, checked: confirm.Confirmed | None, batch: int | None) -> Judged | None:
    """The patched copy's row: its one run against the confirmation's baseline runs, as a new
    observation against the spread of the confirmation's runs (between_runs.pooled_test)."""
    if checked is None or final.copy is None:
        return None
    copy = judging.judged(found.best.as_change(), [final.copy], checked.baseline, batch, found.best.settings)
    copy.change = "patched copy"
    if (copy.note or "").startswith("nothing in this script to apply"):
        # the copy has the change written in it: nothing is injected into it
        copy = Judged.model_validate(copy.model_dump(exclude={"note"}, exclude_unset=True))
    base, _ = checked.values(batch)
    value = confirm.run_figure(final.copy, found.best.settings, batch, checked.basis)
    best = [confirm.run_figure(r, found.best.settings, batch, checked.basis) for r in checked.best]
    others = [best, *checked.spread_groups(batch)]
    tested = pooled_test(base, [value], others) if value and all(base) and all(best) else None
    return _between_runs(copy, tested, checked.basis)


def _between_runs(row: Judged, tested: RunTest | None, basis: str) -> Judged:
    """The row's speed-up, interval, test and verdict those of the test between runs (none: as it was)."""
    if tested is None:
        return row
    return row.set(
        ratio=tested.ratio,
        ratio_low=tested.ratio_low,
        ratio_high=tested.ratio_high,
        p_value=tested.p_value,
        test=tested.test,
        verdict=confirm.verdict_of(tested),
        ratio_clock="epochs" if basis == BY_EPOCHS else "windows",
    )


def _disagreement(best: Judged, copy: Judged, drift: float) -> str | None:
    """Why the patched copy does not do what the injected changes did, or None where it does: it
    trains as many steps an epoch (and, against the baseline, the same training), and its speed-up
    is the best's within the two figures' noise: their intervals between runs overlap, or they are
    as close as two runs of one setting are on this host (`drift`). Both against the same baseline
    runs, by the same clock."""
    if copy.changes_training:
        return copy.changes_training
    if best.epoch_steps and copy.epoch_steps and best.epoch_steps != copy.epoch_steps:
        return f"it trains {copy.epoch_steps:,} steps an epoch where the injected changes trained {best.epoch_steps:,}"
    mine, theirs = (copy.ratio, copy.ratio_low, copy.ratio_high), (best.ratio, best.ratio_low, best.ratio_high)
    if not mine[0] or not theirs[0]:
        return "its speed could not be read"
    apart = abs(mine[0] / theirs[0] - 1)
    if apart <= drift or (None not in (*mine, *theirs) and mine[1] <= theirs[2] and theirs[1] <= mine[2]):
        return None
    return (
        f"{mine[0]:.2f}x against {theirs[0]:.2f}x, {apart:.0%} apart, beyond both intervals and the "
        f"spread of two runs of one setting here ({drift:.0%})"
    )


def summary(found: Outcome, best: Judged | None, checked: confirm.Confirmed | None = None) -> str:
    if not found.path:
        return "no change was faster with significance against the baseline runs beside it"
    path = " -> ".join(["baseline", *("+" + t.change.name for t in found.path)])
    figure = ""
    if best is not None and best.ratio is not None:
        interval = f" [{best.ratio_low:.2f}-{best.ratio_high:.2f}]" if best.ratio_low is not None else ""
        clock = "whole epochs" if best.ratio_clock == "epochs" else "the training steps' windows"
        figure = f"{best.ratio:.2f}x{interval} between runs by {clock}"
    if checked is not None and checked.confirmed:
        return f"{path}: {figure}, {confirm.explained(checked)}"
    why = confirm.explained(checked) if checked is not None else "not confirmed"
    measured = f" ({figure})" if figure else ""
    return f"nothing kept: {path} was chosen in its round, then {why}{measured}"
