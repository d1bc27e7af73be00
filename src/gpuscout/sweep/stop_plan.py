"""What a sweep's early stopping will do, told before it runs (`sweep --dry-run`, issue 78: the
trials and their commands were listed, and not at which epochs they would be judged, nor how many
would go on). Typed data for the text and the JSON alike; the rules themselves are in pruning.py.

A halving rule's survivors are counted as the synchronous schedule would leave them
(stopping.synchronous_counts, the schedule the summary measures the sweep against): at each rung
the best 1 in `factor` of the trials that reached it (at least one), hyperband's later brackets
joining at their first rung. gpuscout's asynchronous rules judge each trial again as its peers
arrive (pruning.py), so a sweep ends near this count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscout.sweep.pruning import MEDIAN_PEERS, bracket_of, first_rung, rungs_until
from gpuscout.sweep.spec import EarlyStop
from gpuscout.sweep.stopping import synchronous_counts

# Rungs listed before "...": where no trial says its epochs, the rungs go on as far as the trials run
LISTED_RUNGS = 5


@dataclass(frozen=True)
class Rung:
    epoch: int
    reach: int  # trials that reach it (the synchronous schedule's count)
    go_on: int  # of them, the best that go on past it
    joining: int = 0  # hyperband: of `reach`, the trials of the bracket first judged here


@dataclass(frozen=True)
class BracketPlan:
    bracket: int  # from 1, as the summary and the reasons say it
    judged_from_epoch: int
    trials: list[int]  # the sweep's trial indexes in it


@dataclass(frozen=True)
class StopPlan:
    kind: str
    rule: str  # the rule in one sentence, with its settings
    epochs: int | None  # the trials' last epoch where their parameters say it (an `epochs` parameter)
    rungs: list[Rung] = field(default_factory=list)  # halving's and hyperband's
    brackets: list[BracketPlan] = field(default_factory=list)  # hyperband's
    first_judged_epoch: int = 1
    more_rungs: bool = False  # the rungs go on past those listed (no `epochs` parameter bounds them)
    factor: int | None = None  # halving's and hyperband's: 1 in this many go on at a rung


def epochs_of(params: list[dict[str, Any]]) -> int | None:
    """The trials' last epoch where every trial's parameters hold a whole `epochs`; else None."""
    values = [p.get("epochs") for p in params]
    whole = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(whole) if whole and len(whole) == len(values) else None


def rung_epochs(stop: EarlyStop, epochs: int | None) -> tuple[list[int], bool]:
    """The rungs up to `epochs` (LISTED_RUNGS of them where `epochs` is unknown), and whether more
    follow."""
    if epochs is None:
        return [first_rung(stop, k) for k in range(LISTED_RUNGS)], True
    return rungs_until(stop, epochs), False


def survivors(entering: list[int], epochs: list[int], factor: int) -> list[Rung]:
    """The synchronous schedule's counts at each rung, listed up to the first rung that fewer trials
    than the factor reach with no bracket joining after: no rung judges them again, and they run
    to the end."""
    out = []
    for k, (epoch, (reach, go_on)) in enumerate(zip(epochs, synchronous_counts(entering, epochs, factor))):
        out.append(Rung(epoch, reach, go_on, entering[k] if 0 < k < len(entering) else 0))
        if reach < factor and k + 1 >= len(entering):
            break
    return out


def plan(stop: EarlyStop, trials: list[int], params: list[dict[str, Any]], metric: str) -> StopPlan:
    """The plan of `stop` for the sweep's trials (their indexes and parameters)."""
    epochs = epochs_of(params)
    g, f, smooth = stop.grace_epochs, stop.reduction_factor, stop.smooth_epochs
    best_of = f" (each judged on the best of its last {smooth} reports)" if smooth > 1 else ""
    if stop.kind == "patience":
        rule = (
            f"a trial stops once its best {metric} has not bettered in {stop.patience_epochs} epochs, "
            f"judged from epoch {max(g, stop.patience_epochs + 1)} on"
        )
        return StopPlan(stop.kind, rule, epochs, first_judged_epoch=max(g, stop.patience_epochs + 1))
    if stop.kind in ("median", "optuna_median"):
        whose = (
            f"the median of the other trials not stopped at the same epoch (at least {MEDIAN_PEERS} of them)" + best_of
            if stop.kind == "median"
            else "the median of the finished and running trials at the same epoch (Optuna's MedianPruner)"
        )
        rule = f"from epoch {g} on, at every epoch, a trial whose {metric} is worse than {whose} stops"
        return StopPlan(stop.kind, rule, epochs, first_judged_epoch=g)
    rung_list, more = rung_epochs(stop, epochs)
    if stop.kind == "optuna_hyperband":
        rule = (
            f"Optuna's HyperbandPruner: brackets of successive halving from epoch {g}, factor {f}, each "
            "bracket judged among its own trials as they arrive"
        )
        return StopPlan(stop.kind, rule, epochs, survivors([len(trials)], rung_list, f), first_judged_epoch=g, factor=f)
    rule = f"at each rung the best 1 in {f} of the trials that reached it go on{best_of}"
    if stop.kind == "successive_halving":
        rungs = survivors([len(trials)], rung_list, f)
        return StopPlan(
            stop.kind, rule, epochs, rungs, first_judged_epoch=g, more_rungs=more and rungs[-1].reach >= f, factor=f
        )
    held: dict[int, list[int]] = {}
    for index in trials:
        held.setdefault(bracket_of(index, stop.brackets, f), []).append(index)
    brackets = [BracketPlan(b + 1, first_rung(stop, b), held.get(b, [])) for b in range(stop.brackets)]
    rungs = survivors([len(b.trials) for b in brackets], rung_list, f)
    rule += "; a trial is judged only from its bracket's first rung on, against every trial that reached the rung"
    return StopPlan(stop.kind, rule, epochs, rungs, brackets, g, more and rungs[-1].reach >= f, f)
