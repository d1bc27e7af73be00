"""What a sweep's early stopping saved and what it may have cost, for its summary: epochs run
against planned, the trial time not spent, the same trials under the synchronous schedule
(what asynchronous halving is measured against), hyperband's brackets, the best trial's rank
at each rung, and how likely a pruned trial was to have won. Read from the trials' results
after the sweep (sweep/summary.py); the decisions themselves are sweep/pruning.py's and
sweep/search.py's."""

from __future__ import annotations

import numpy as np

from gpuscout.record.trial import TrialOutcome
from gpuscout.sweep import pruning
from gpuscout.sweep.results import Bracket, ChanceToWin, EarlyStopSummary, RungRank
from gpuscout.sweep.search import halving_rungs, rungs
from gpuscout.sweep.spec import SweepFile, score


def stopping_summary(
    sweep: SweepFile, results: list[TrialOutcome], best: TrialOutcome | None
) -> EarlyStopSummary | None:
    """What early stopping saved: epochs run against planned, the trial time not spent (a trial's
    time per epoch x the epochs it did not run), and the best trial's rank at each rung (was it
    ever at risk?)."""
    if sweep.early_stop is None:
        return None
    ran = [r for r in results if r.status in ("ok", "pruned")]
    planned_of = {r.key: r.steps.epochs_planned if r.steps else None for r in ran}
    run_of = {r.key: _epochs(r) for r in ran}
    start_s, epoch_s = trial_pace([(run_of[r.key], r.duration_s) for r in ran if run_of[r.key]])
    saved_s = sum(
        epoch_s * (planned - run_of[r.key])
        for r in ran
        if r.status == "pruned" and run_of[r.key] and (planned := planned_of[r.key])
    )
    # the trials' length: what fit planned, or where a script's own loop reports no plan, the most any ran
    most = max((p for p in planned_of.values() if p), default=0) or max(run_of.values(), default=0)
    indexes = [r.index for r in ran]
    ranks = []
    if best is not None:
        for rung in halving_rungs(sweep, most):
            at = {r.key: _value_at(r, sweep.metric.name, rung) for r in ran}
            values = [v for v in at.values() if v is not None]
            mine = at.get(best.key)
            if mine is None or not values:
                continue
            better = sum(1 for v in values if (v > mine if sweep.metric.direction == "max" else v < mine))
            ranks.append(RungRank(epoch=rung, rank=better + 1, of=len(values)))
    used_s = sum(r.duration_s for r in ran)
    stop = sweep.early_stop
    return EarlyStopSummary(
        kind=stop.kind,
        pruned=sum(1 for r in ran if r.status == "pruned"),
        epochs_run=sum(run_of.values()),
        epochs_planned=sum(p or run_of[k] for k, p in planned_of.items()),
        # the same trials under the synchronous schedule: what asynchronous halving is measured against
        epochs_synchronous=synchronous_schedule(sweep, indexes, most) if most else None,
        trial_hours_used=used_s / 3600,
        trial_hours_saved=saved_s / 3600,
        trial_start_s=start_s,
        epoch_s=epoch_s,
        best_rank_at_rungs=ranks,
        pruned_could_win=could_have_won(sweep, ran),
        finished=sum(1 for r in ran if r.status == "ok"),
        brackets=brackets(sweep, indexes),
    )


def brackets(sweep: SweepFile, indexes: list[int]) -> list[Bracket] | None:
    """hyperband: how many of these trials each bracket held, and the epoch each judges from."""
    stop = sweep.early_stop
    if stop.kind != "hyperband":
        return None
    held = [pruning.bracket_of(i, stop.brackets, stop.reduction_factor) for i in indexes]
    return [Bracket(trials=held.count(b), judged_from_epoch=pruning.first_rung(stop, b)) for b in range(stop.brackets)]


def trial_pace(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(start-up seconds, seconds an epoch) of a sweep's trials: the least-squares line through
    (epochs run, seconds) over its trials. A pruned trial's time is mostly its start-up (a Python
    process, imports, the first compile: 6 s of a 9 s trial pruned at epoch 3, on the CPU); its
    time over its epochs would count that start-up in each epoch it did not run. With one epoch
    count among them, no line: each epoch takes the trials' seconds over their epochs."""
    epochs = np.asarray([e for e, _ in points], dtype=float)
    seconds = np.asarray([s for _, s in points], dtype=float)
    if len(set(epochs)) < 2:
        return 0.0, float(seconds.sum() / epochs.sum()) if epochs.sum() else 0.0
    slope, intercept = np.polyfit(epochs, seconds, 1)
    return float(max(intercept, 0.0)), float(max(slope, 0.0))


def synchronous_schedule(sweep: SweepFile, indexes: list[int], epochs: int) -> int | None:
    """The epochs that the rule's synchronous schedule runs on these trials (None for the rules
    that have no rungs: median, patience)."""
    stop = sweep.early_stop
    grid = rungs(sweep, epochs)
    if stop.kind in ("successive_halving", "optuna_hyperband"):  # Optuna's: its brackets are its own
        return synchronous_epochs([len(indexes)], epochs, grid, stop.reduction_factor)
    if stop.kind != "hyperband":
        return None
    return synchronous_epochs([b.trials for b in brackets(sweep, indexes) or []], epochs, grid, stop.reduction_factor)


def synchronous_counts(entering: list[int], at: list[int], factor: int) -> list[tuple[int, int]]:
    """(trials that reach it, trials that go on) at each rung of `at` under synchronous successive
    halving: `entering[k]` trials are first judged at rung k (successive halving: all at the
    first; hyperband: bracket k's at the k-th) beside those that went on from the rung before; the
    best 1/factor (at least one) go on, and a rung reached by fewer than `factor` trials judges
    no one, as pruning.halving does."""
    out, alive = [], 0
    for k in range(len(at)):
        reach = alive + (entering[k] if k < len(entering) else 0)
        alive = reach if reach < factor else max(1, reach // factor)
        out.append((reach, alive))
    return out


def synchronous_epochs(entering: list[int], epochs: int, at: list[int], factor: int) -> int:
    """Epochs that synchronous successive halving runs on synchronous_counts' trials: those that
    reach a rung ran to it from the rung before (the new ones from the start), the last ones to
    `epochs`; a bracket past the last rung runs to the end."""
    total, alive, done = 0, 0, 0
    for rung, (reach, go_on) in zip(at, synchronous_counts(entering, at, factor)):
        new = reach - alive
        total += alive * (rung - done) + new * rung
        alive, done = go_on, rung
    late = sum(entering[len(at) :])
    return total + alive * (epochs - done) + late * epochs


def could_have_won(sweep: SweepFile, ran: list[TrialOutcome]) -> ChanceToWin | None:
    """How likely a pruned trial was to win, from the curves that ran to the end: of the finished
    trials that stood as low as it did where it was stopped (each judged on the best of its last
    smooth_epochs), how many still ended within the winner's own noise (the spread of its last
    smooth_epochs). The largest such share over the pruned trials; None where none can be told."""
    metric, maximize = sweep.metric.name, sweep.metric.direction == "max"
    smooth = sweep.early_stop.smooth_epochs
    curves = {
        r.key: pruning.finite({e: score(h[metric]) for h in r.history if (e := _epoch_of(h)) and metric in h})
        for r in ran
    }
    done = [r.key for r in ran if r.status == "ok" and curves[r.key]]
    pruned = [r.key for r in ran if r.status == "pruned" and curves[r.key]]
    if not done or not pruned:
        return None
    final = {k: pruning.smoothed(curves[k], max(curves[k]), smooth, maximize) for k in done}
    winner = max(done, key=lambda k: final[k] if maximize else -final[k])
    tail = [curves[winner][e] for e in sorted(curves[winner])[-smooth:]]
    noise = max(tail) - min(tail)
    worst, told = None, 0
    for key in pruned:
        at = max(curves[key])
        mine = pruning.smoothed(curves[key], at, smooth, maximize)
        low = [
            k
            for k in done
            if (v := pruning.smoothed(curves[k], at, smooth, maximize)) is not None
            and (v <= mine if maximize else v >= mine)
        ]
        if not low:
            continue
        told += 1
        won = sum(
            1 for k in low if (final[k] >= final[winner] - noise if maximize else final[k] <= final[winner] + noise)
        )
        if worst is None or won / len(low) > worst["share"]:
            worst = {"share": won / len(low), "won": won, "of": len(low), "epoch": at}
    if worst is None:
        return None
    # A share of one curve is no chance at all (issue 75: "100% (only 1 such curves)"): from two on,
    # the share comes with its Wilson 95% interval (scipy's binomtest), which says how little a few
    # curves tell; from one, no share
    low_ci = high_ci = None
    if worst["of"] >= 2:
        from scipy.stats import binomtest  # lazily: see analysis/stats.py

        ci = binomtest(worst["won"], worst["of"]).proportion_ci(confidence_level=0.95, method="wilson")
        low_ci, high_ci = float(ci.low), float(ci.high)
    else:
        worst["share"] = None
    return ChanceToWin(**worst, share_low=low_ci, share_high=high_ci, noise=noise, pruned_told=told, pruned=len(pruned))


def _epochs(result: TrialOutcome) -> int:
    return sum(1 for h in result.history if _epoch_of(h) is not None)


def _epoch_of(entry: dict) -> int | None:
    """A history entry's epoch: fit's logs and JSON lines say "epoch", gpuscout.sweep.report "step"."""
    try:
        return int(entry.get("epoch", entry.get("step")))
    except (TypeError, ValueError):
        return None


def reported_per_epoch(result: TrialOutcome, metric: str) -> bool:
    """Whether a trial's history holds `metric` at some epoch (what a pruner needs): a script
    that prints or reports it once, at its end, gives none, and nothing can be pruned."""
    return any(_epoch_of(h) is not None and metric in h for h in result.history)


def _value_at(result: TrialOutcome, metric: str, epoch: int) -> float | None:
    for h in result.history:
        if _epoch_of(h) == epoch and metric in h:
            return score(h[metric])
    return None
