"""Early stopping's rules (issue 64), as pure functions of the trials' curves, and the Optuna
pruner that applies them (Optuna's plug-in interface: `BasePruner.prune(study, trial)`).

Asynchronous successive halving (ASHA, Li et al. 2020, "A System for Massively Parallel
Hyperparameter Tuning") promotes a trial at a rung when it is in the best 1/factor of the trials
that reached that rung *so far*. The first trials to arrive have few peers, so they are promoted
however poor they are, and then run to the end: measured on 16 trials of 300 epochs, 8 ran every
epoch and the sweep cost 0.73x of running them all, where the synchronous schedule needs 0.08x.
Two changes here:

- **Judged again as peers arrive.** At every report a trial is judged at every rung it has
  passed, against all the trials that have reached that rung by now; a rung with fewer than
  `factor` trials judges no one yet. A trial promoted early with few peers is stopped once
  enough better ones have passed the same rung, as the synchronous schedule would have stopped
  it, and every slot stays busy meanwhile.
- **Judged on the best of its last reports.** One epoch's validation accuracy on 397 samples
  moves by a sample (0.25%) or more from epoch to epoch; a trial and its peers are compared by
  the best value of their last `smooth` reports up to the rung, so one bad epoch does not cut the
  best trial.

`hyperband` hedges the grace (Li et al. 2018, "Hyperband"): each trial is in one of `brackets`
brackets, and a trial of bracket b is judged only from the rung `grace x factor^b` on, so a slow
starter of a later bracket is not cut at epoch 3. Brackets get trials as Hyperband's budget does
(n_s proportional to (s_max+1)/(s+1) x factor^s, s = s_max - b): most in the most aggressive
bracket, a few judged late. Unlike Hyperband's independent brackets, a rung's peers are all the
trials that reached it, whatever their bracket: a sweep of 16 trials split three ways left 3 to 8
peers a bracket, and the best trial was cut ranking 2 of 5 at epoch 3 where it ranked within the
best 5 of 16 (docs/benchmarks.md). Optuna's own HyperbandPruner runs each bracket's halving
asynchronously, as first described: 0.80-0.98x of the full sweep on the issue's trials.

`median` stops a trial whose value (the best of its last `smooth` reports) is worse than the
median of the other trials' at the same epoch (the median stopping rule of Google Vizier,
Golovin et al. 2017), among the trials not stopped, running or finished, not only finished ones:
with four slots, no trial finishes before the first four have run to the end. At least
MEDIAN_PEERS others must be there: against one other trial, pairwise comparisons at the epochs
the others had reached stopped all 16 of issue 64's trials, the best one included. A trial
ahead of all the others is judged at the furthest epoch two of them have reached, not let run
until they catch up; the last trial running has no peers left and finishes.

`patience` stops a trial whose own best has not improved for `patience` epochs after the grace,
the user's own early-stopping rule (Keras' EarlyStopping) applied by the sweep.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from gpuscout.core.units import counted

Curve = dict[int, float]  # epoch (from 1) -> the metric reported at its end
Peers = list[tuple[int, Curve]]  # the other trials: (the sweep's trial index, its curve)

# How many peers a reason names, best first, before "and N more": the ones that beat it, found
# again by index in the live view, `--dry-run` and `--json`; one line where dozens reach a rung
NAMED = 4


@dataclass(frozen=True)
class Verdict:
    stop: bool
    why: str = ""  # the rung, the value, the peers it was compared with


def finite(points: dict[int, float | None]) -> Curve:
    """A curve as every rule reads it: the epochs whose report is a finite number. A NaN, an
    infinity, a text or a report without its metric is no point of it (issue 79: a trial that
    printed NaN and Infinity stopped the sweep's summary with a TypeError), whoever reads the
    trial's reports: the live pruner, the summary's early-stopping account, resume."""
    return {e: float(v) for e, v in points.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def smoothed(curve: Curve, epoch: int, smooth: int, maximize: bool) -> float | None:
    """The best of the last `smooth` reports up to `epoch` (None: nothing reported by then)."""
    curve = finite(curve)
    upto = sorted(e for e in curve if e <= epoch)
    if not upto:
        return None
    last = [curve[e] for e in upto[-smooth:]]
    return max(last) if maximize else min(last)


def at_epoch(peers: Peers, epoch: int, smooth: int, maximize: bool) -> list[tuple[int, float]]:
    """(index, smoothed value) of the peers that have reached `epoch`, best first."""
    values = [
        (index, v)
        for index, p in peers
        if max(p, default=0) >= epoch and (v := smoothed(p, epoch, smooth, maximize)) is not None
    ]
    return sorted(values, key=lambda iv: -iv[1] if maximize else iv[1])


def named(values: list[tuple[int, float]]) -> str:
    """'trials 3 (0.91), 6 (0.9) and 2 more': the trials and their values, as given (best first)."""
    shown = [f"{index} ({value:.4g})" for index, value in values[:NAMED]]
    more = len(values) - len(shown)
    listed = shown + [f"{more} more"] if more else shown
    words = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    return f"trial{'s' if len(values) > 1 else ''} {words}"


def halving(
    mine: Curve, peers: Peers, rungs: list[int], factor: int, smooth: int, maximize: bool, metric: str
) -> Verdict:
    """Stop when, at some rung this trial has passed, it is not in the best 1/factor (at least
    one) of the trials that have reached that rung, itself included; a rung reached by fewer
    than `factor` trials judges no one yet. The reason names the trials that go on."""
    reached = max(mine, default=0)
    for rung in (r for r in rungs if r <= reached):
        value = smoothed(mine, rung, smooth, maximize)
        others = at_epoch(peers, rung, smooth, maximize)
        count = len(others) + 1
        if value is None or count < factor:
            continue
        keep = max(1, count // factor)
        rank = 1 + sum(1 for _, v in others if (v > value if maximize else v < value))
        if rank > keep:
            return Verdict(
                True,
                f"at epoch {rung}: {metric} {value:.4g} (best of its last {smooth}) ranked {rank} of the {count} "
                f"trials that reached it; the best {keep} go on (1 in {factor}): {named(others[:keep])}",
            )
    return Verdict(False)


# The fewest other trials whose median judges a trial: one other trial is a comparison, not a median
MEDIAN_PEERS = 2


def median(mine: Curve, peers: Peers, grace: int, smooth: int, maximize: bool, metric: str) -> Verdict:
    """Stop when, at the latest epoch (from the grace on) that it and at least MEDIAN_PEERS
    other trials have reached, its value is worse than the median of the others' there (`peers`:
    the trials not stopped). A trial ahead of the others is judged where they are. The reason
    names those others, best first."""
    reached = max(mine, default=0)
    fronts = sorted((min(reached, max(p, default=0)) for _, p in peers), reverse=True)
    at = fronts[MEDIAN_PEERS - 1] if len(fronts) >= MEDIAN_PEERS else 0
    if at < grace:
        return Verdict(False)
    value = smoothed(mine, at, smooth, maximize)
    others = at_epoch(peers, at, smooth, maximize)
    if value is None or not others:
        return Verdict(False)
    middle = statistics.median(v for _, v in others)
    if not (value < middle if maximize else value > middle):
        return Verdict(False)
    return Verdict(
        True,
        f"at epoch {at}: {metric} {value:.4g} (best of its last {smooth}) worse than {middle:.4g}, the median of "
        f"the {len(others)} other trial{'s' if len(others) > 1 else ''} that reached it: {named(others)}",
    )


def bracket_shares(brackets: int, factor: int) -> list[float]:
    """The share of the trials each bracket gets (bracket 0 judged from the grace on): Hyperband's
    trial counts, n_s ~ (s_max+1)/(s+1) x factor^s with s = s_max - b, each bracket's budget about
    equal. Three brackets at factor 3: 9 : 4.5 : 3."""
    weights = [brackets / (brackets - b) * factor ** (brackets - 1 - b) for b in range(brackets)]
    return [w / sum(weights) for w in weights]


# The golden ratio's fraction: trial i's point (i + 1) x GOLDEN mod 1 spreads any run of
# consecutive trials evenly over [0, 1) (Weyl's sequence), so the first few trials already meet
# every bracket in its share, and a trial's bracket depends on its index alone (--resume keeps it)
GOLDEN = (math.sqrt(5) - 1) / 2


def first_rung(stop, bracket: int) -> int:
    """The epoch from which hyperband judges a trial of `bracket` (from 0): grace x factor^bracket."""
    return stop.grace_epochs * stop.reduction_factor**bracket


def rungs_until(stop, epochs: int) -> list[int]:
    """grace x factor^k up to `epochs`: the rungs of halving and hyperband (first_rung of each k)."""
    out, rung = [], stop.grace_epochs
    while rung <= epochs:
        out.append(rung)
        rung *= stop.reduction_factor
    return out


def bracket_of(index: int, brackets: int, factor: int) -> int:
    """The bracket of the sweep's trial `index` (from 0)."""
    point, edge = ((index + 1) * GOLDEN) % 1.0, 0.0
    for bracket, share in enumerate(bracket_shares(brackets, factor)):
        edge += share
        if point < edge:
            return bracket
    return brackets - 1


def patience(mine: Curve, grace: int, epochs: int, maximize: bool, metric: str) -> Verdict:
    """Stop when the trial's best has not improved in its last `epochs` reports, after the grace."""
    done = sorted(e for e in mine if math.isfinite(mine[e]))
    if not done or done[-1] < max(grace, epochs + 1):
        return Verdict(False)
    before = [mine[e] for e in done[:-epochs]]
    recent = [mine[e] for e in done[-epochs:]]
    best_before = max(before) if maximize else min(before)
    improved = max(recent) > best_before if maximize else min(recent) < best_before
    if improved:
        return Verdict(False)
    return Verdict(
        True, f"at epoch {done[-1]}: {metric} has not bettered {best_before:.4g} in {counted(epochs, 'epoch')}"
    )


def judge(stop, mine: Curve, peers: Peers, bracket: int, rungs: list[int], maximize: bool, metric: str):
    """The verdict of the sweep file's `early_stop` rule on one trial (`peers`: the other trials'
    indexes and curves; `bracket`: its hyperband bracket; `rungs`: the rungs up to its epoch)."""
    if stop.kind == "patience":
        return patience(mine, stop.grace_epochs, stop.patience_epochs, maximize, metric)
    if stop.kind == "median":
        return median(mine, peers, stop.grace_epochs, stop.smooth_epochs, maximize, metric)
    at = [r for r in rungs if r >= first_rung(stop, bracket)]  # bracket 0 (halving's): every rung
    verdict = halving(mine, peers, at, stop.reduction_factor, stop.smooth_epochs, maximize, metric)
    if verdict.stop and stop.kind == "hyperband":  # its bracket said: why it was not judged earlier
        where = f"bracket {bracket + 1} of {stop.brackets} (judged from epoch {first_rung(stop, bracket)})"
        return Verdict(True, f"{where}, {verdict.why}")
    return verdict


def make_pruner(optuna, stop, rungs_of, maximize: bool, metric: str, bracket_attr: str, index_attr: str):
    """The Optuna pruner of gpuscout's rules for the sweep file's `early_stop` (`rungs_of(epochs)`:
    the rungs up to an epoch; `bracket_attr`, `index_attr`: the user attributes that hold a
    trial's bracket and its index in the sweep); `why[trial number]` keeps each stop's reason for
    the trial's record."""
    state = optuna.trial.TrialState
    # the median counts the trials not stopped; halving's rungs every trial that reached them
    states = (state.COMPLETE, state.RUNNING) + (() if stop.kind == "median" else (state.PRUNED,))

    class GpuscoutPruner(optuna.pruners.BasePruner):
        def __init__(self) -> None:
            self.why: dict[int, str] = {}

        def prune(self, study, trial) -> bool:
            mine = dict(trial.intermediate_values)
            bracket = trial.user_attrs.get(bracket_attr, 0)
            peers = [  # a study begun before trials carried their index: Optuna's number
                (t.user_attrs.get(index_attr, t.number), dict(t.intermediate_values))
                for t in ([] if stop.kind == "patience" else study.get_trials(deepcopy=False, states=states))
                if t.number != trial.number
            ]
            verdict = judge(stop, mine, peers, bracket, rungs_of(max(mine, default=0)), maximize, metric)
            if verdict.stop:
                self.why[trial.number] = verdict.why
            return verdict.stop

    return GpuscoutPruner()
