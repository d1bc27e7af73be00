"""Model-based search and early stopping for a sweep, through Optuna's ask-and-tell interface.

Optuna is the field's well-kept implementation of both: its TPE sampler proposes, and its study
keeps every trial's reports. The early-stopping rules are gpuscout's (sweep/pruning.py: judged
again as peers arrive, on a smoothed metric), plugged in through Optuna's pruner interface;
Optuna's own HyperbandPruner and MedianPruner stay as `optuna_hyperband` and `optuna_median`,
the peers they are measured against. The study lives beside the sweep's files in
Optuna's journal file (`study.journal` under the sweep's log folder), so `--resume` after a
crash keeps every decision: what the sampler learnt, which trials were pruned at which epoch.

gpuscout's own trial key (what the store and --resume match) is kept on each Optuna trial as the
user attribute `gpuscout_key`. A trial whose driver died while it ran is told FAIL on resume (it
reached no result) and runs again as a new Optuna trial with the same parameters, so the sampler
never learns from it twice.

All calls are serialised by one lock: the driver thread begins and finishes trials, and each
trial's event reader reports its epochs.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np

from gpuscout.core.errors import UsageError
from gpuscout.sweep import pruning
from gpuscout.sweep.expansion import Trial, trial_key
from gpuscout.sweep.spec import SweepFile, score, values_or_range

JOURNAL = "study.journal"
KEY_ATTR = "gpuscout_key"
BRACKET_ATTR = "gpuscout_bracket"  # hyperband: the trial's bracket (from its index, so --resume keeps it)
INDEX_ATTR = "gpuscout_index"  # the sweep's trial index: what a pruned trial's reason names its peers by


def require_optuna():
    try:
        import optuna
    except ModuleNotFoundError:
        raise UsageError(
            "early_stop and strategy tpe use Optuna, which is not installed: pip install 'gpuscout[sweep]'"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def needed(sweep: SweepFile) -> bool:
    return sweep.early_stop is not None or sweep.strategy.kind == "tpe"


def distributions(sweep: SweepFile) -> dict:
    """gpuscout's space as Optuna's distributions: lists and choices categorical, uniform and
    loguniform floats (log scale for the latter), int an integer range (both ends included)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out = {}
    for name, dim in sweep.space.items():
        kind, arg = values_or_range(name, dim)
        if kind == "values":
            out[name] = CategoricalDistribution(list(arg))
        elif kind == "uniform":
            out[name] = FloatDistribution(float(arg[0]), float(arg[1]))
        elif kind == "loguniform":
            out[name] = FloatDistribution(float(arg[0]), float(arg[1]), log=True)
        else:
            out[name] = IntDistribution(int(arg[0]), int(arg[1]))
    return out


def _study_settings(optuna, sweep: SweepFile) -> dict:
    """The direction and sampler of a sweep's study, the same for the sweep and its dry run."""
    seed = sweep.strategy.seed
    return {
        "direction": "maximize" if sweep.metric.direction == "max" else "minimize",
        "sampler": optuna.samplers.TPESampler(seed=seed)
        if sweep.strategy.kind == "tpe"
        else optuna.samplers.RandomSampler(seed=seed),
    }


class Search:
    """One sweep's Optuna study: proposals (tpe), and the pruner's verdict at each epoch."""

    def __init__(self, sweep: SweepFile, log_root: Path) -> None:
        optuna = require_optuna()
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        self.optuna, self.sweep = optuna, sweep
        self.lock = threading.Lock()
        self.live: dict[str, object] = {}  # gpuscout key -> Optuna trial being run
        self.why: dict[str, str] = {}  # gpuscout key -> why the pruner stopped it
        log_root.mkdir(parents=True, exist_ok=True)
        self.path = log_root / JOURNAL
        self.space = distributions(sweep)
        self.study = optuna.create_study(
            study_name=sweep.name,
            storage=JournalStorage(JournalFileBackend(str(self.path))),
            **_study_settings(optuna, sweep),
            pruner=self._pruner(),
            load_if_exists=True,
        )
        for t in self.study.get_trials(deepcopy=False):  # a driver died while these ran: no result
            if t.state == optuna.trial.TrialState.RUNNING:
                self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)

    def _pruner(self):
        stop, pruners = self.sweep.early_stop, self.optuna.pruners
        if stop is None:
            return pruners.NopPruner()
        if stop.kind == "optuna_hyperband":  # Optuna's, as Optuna runs it: the peer gpuscout's are measured against
            return pruners.HyperbandPruner(min_resource=stop.grace_epochs, reduction_factor=stop.reduction_factor)
        if stop.kind == "optuna_median":
            # Optuna protects steps below n_warmup_steps; our steps are epochs counted from 1
            return pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=stop.grace_epochs)
        return pruning.make_pruner(
            self.optuna,
            stop,
            lambda epochs: rungs(self.sweep, epochs),
            self.sweep.metric.direction == "max",
            self.sweep.metric.name,
            BRACKET_ATTR,
            INDEX_ATTR,
        )

    @property
    def prunes(self) -> bool:
        return self.sweep.early_stop is not None

    # -- the driver's side

    def begin(self, trial: Trial) -> None:
        """A planned trial (grid, random, or a proposal run again) starts: its Optuna trial."""
        with self.lock:
            if trial.key in self.live:
                return
            self.study.enqueue_trial(trial.params, skip_if_exists=False)
            t = self.study.ask(self.space)
            self._mark(t, trial.key, trial.index)

    def propose(self, index: int) -> Trial:
        """tpe: the sampler's next trial, from every result told so far."""
        with self.lock:
            t = self.study.ask(self.space)
            params = {name: _plain(value) for name, value in t.params.items()}
            key = trial_key(self.sweep, {"tpe_trial": t.number, **params})
            self._mark(t, key, index)
            return Trial(key, index, params)

    def _mark(self, t, key: str, index: int) -> None:
        """An Optuna trial begun for gpuscout's trial `key`: its key and index, and its hyperband bracket."""
        t.set_user_attr(KEY_ATTR, key)
        t.set_user_attr(INDEX_ATTR, index)
        if self.sweep.early_stop is not None and self.sweep.early_stop.kind == "hyperband":
            stop = self.sweep.early_stop
            t.set_user_attr(BRACKET_ATTR, pruning.bracket_of(index, stop.brackets, stop.reduction_factor))
        self.live[key] = t

    def report(self, key: str, epoch: int, value: float) -> bool:
        """One epoch's metric; True when the pruner stops the trial here."""
        with self.lock:
            t = self.live.get(key)
            if t is None or not math.isfinite(value):
                return False
            t.report(value, epoch)
            stop = self.prunes and t.should_prune()
            if stop:
                self.why[key] = getattr(self.study.pruner, "why", {}).get(t.number, "")
            return stop

    def finish(self, key: str, status: str, value: float | None) -> None:
        """Tell the study how the trial ended: its metric (complete), pruned, or failed."""
        states = self.optuna.trial.TrialState
        with self.lock:
            t = self.live.pop(key, None)
            if t is None:
                return
            if status == "pruned":
                self.study.tell(t, state=states.PRUNED)
            elif status == "ok" and value is not None and math.isfinite(value):
                self.study.tell(t, value)
            else:
                self.study.tell(t, state=states.FAIL)


def first_proposals(sweep: SweepFile, count: int) -> list[Trial]:
    """tpe: the trials the sampler proposes first, before any result, as a new sweep's study would
    (the same sampler and seed): what a dry run shows. A sweep asks one per slot before the first
    result comes back, so these are the trials that start first; the later ones follow the results."""
    optuna = require_optuna()
    study = optuna.create_study(**_study_settings(optuna, sweep))
    space, out = distributions(sweep), []
    for index in range(min(count, sweep.strategy.trials)):
        t = study.ask(space)
        params = {name: _plain(value) for name, value in t.params.items()}
        out.append(Trial(trial_key(sweep, {"tpe_trial": t.number, **params}), index, params))
    return out


def _plain(value):
    """Optuna's numpy scalars as plain Python numbers (they go into a command line and JSON)."""
    return value.item() if hasattr(value, "item") else value


def rungs(sweep: SweepFile, epochs: int) -> list[int]:
    """The epochs at which the pruner decides: successive halving's rungs (grace x factor^k), or
    every epoch from the grace (median, patience)."""
    stop = sweep.early_stop
    if stop is None:
        return []
    if stop.kind in ("median", "patience", "optuna_median"):
        return list(range(stop.grace_epochs, epochs + 1))
    return halving_rungs(sweep, epochs)


def halving_rungs(sweep: SweepFile, epochs: int) -> list[int]:
    """grace x factor^k up to `epochs`: halving's and hyperband's rungs, and where the summary
    gives the best trial's rank under every rule (under median, one rank an epoch made a line of
    65 ranks for a sweep of 70 epochs)."""
    stop = sweep.early_stop
    out, rung = [], stop.grace_epochs
    while rung <= epochs:
        out.append(rung)
        rung *= stop.reduction_factor
    return out


def stopping_summary(sweep: SweepFile, results: list[dict], best: dict | None) -> dict | None:
    """What early stopping saved: epochs run against planned, the trial time not spent (a trial's
    time per epoch x the epochs it did not run), and the best trial's rank at each rung (was it
    ever at risk?)."""
    if sweep.early_stop is None:
        return None
    ran = [r for r in results if r["status"] in ("ok", "pruned")]
    planned_of = {r["key"]: _planned(r) for r in ran}
    run_of = {r["key"]: _epochs(r) for r in ran}
    start_s, epoch_s = trial_pace([(run_of[r["key"]], r["duration_s"]) for r in ran if run_of[r["key"]]])
    saved_s = sum(
        epoch_s * (planned_of[r["key"]] - run_of[r["key"]])
        for r in ran
        if r["status"] == "pruned" and run_of[r["key"]] and planned_of[r["key"]]
    )
    # the trials' length: what fit planned, or where a script's own loop reports no plan, the most any ran
    most = max((p for p in planned_of.values() if p), default=0) or max(run_of.values(), default=0)
    indexes = [r["index"] for r in ran]
    ranks = []
    if best is not None:
        for rung in halving_rungs(sweep, most):
            at = {r["key"]: _value_at(r, sweep.metric.name, rung) for r in ran}
            values = [v for v in at.values() if v is not None]
            mine = at.get(best["key"])
            if mine is None or not values:
                continue
            better = sum(1 for v in values if (v > mine if sweep.metric.direction == "max" else v < mine))
            ranks.append({"epoch": rung, "rank": better + 1, "of": len(values)})
    used_s = sum(r["duration_s"] for r in ran)
    stop = sweep.early_stop
    return {
        "kind": stop.kind,
        "pruned": sum(1 for r in ran if r["status"] == "pruned"),
        "epochs_run": sum(run_of.values()),
        "epochs_planned": sum(p or run_of[k] for k, p in planned_of.items()),
        # the same trials under the synchronous schedule: what asynchronous halving is measured against
        "epochs_synchronous": synchronous_schedule(sweep, indexes, most) if most else None,
        "trial_hours_used": used_s / 3600,
        "trial_hours_saved": saved_s / 3600,  # the pruned trials' epochs not run, at the trials' pace
        "trial_start_s": start_s,  # the pace: start-up, then seconds an epoch (trial_pace)
        "epoch_s": epoch_s,
        "best_rank_at_rungs": ranks,
        "pruned_could_win": could_have_won(sweep, ran),
        "finished": sum(1 for r in ran if r["status"] == "ok"),  # the curves that chance is read from
        "brackets": brackets(sweep, indexes),
    }


def brackets(sweep: SweepFile, indexes: list[int]) -> list[dict] | None:
    """hyperband: how many of these trials each bracket held, and the epoch each judges from."""
    stop = sweep.early_stop
    if stop.kind != "hyperband":
        return None
    held = [pruning.bracket_of(i, stop.brackets, stop.reduction_factor) for i in indexes]
    return [{"trials": held.count(b), "judged_from_epoch": pruning.first_rung(stop, b)} for b in range(stop.brackets)]


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
    return synchronous_epochs([b["trials"] for b in brackets(sweep, indexes)], epochs, grid, stop.reduction_factor)


def synchronous_epochs(entering: list[int], epochs: int, at: list[int], factor: int) -> int:
    """Epochs that synchronous successive halving runs: `entering[k]` trials are first judged at
    rung k (successive halving: all at the first; hyperband: bracket k's at the k-th), the best
    1/factor (at least one) of those at a rung go on to the next, the last ones to `epochs`; a
    bracket past the last rung runs to the end."""
    total, alive, done = 0, 0, 0
    for k, rung in enumerate(at):
        new = entering[k] if k < len(entering) else 0
        total += alive * (rung - done) + new * rung
        alive, done = max(1, (alive + new) // factor) if alive + new else 0, rung
    late = sum(entering[len(at) :])
    return total + alive * (epochs - done) + late * epochs


def could_have_won(sweep: SweepFile, ran: list[dict]) -> dict | None:
    """How likely a pruned trial was to win, from the curves that ran to the end: of the finished
    trials that stood as low as it did where it was stopped (each judged on the best of its last
    smooth_epochs), how many still ended within the winner's own noise (the spread of its last
    smooth_epochs). The largest such share over the pruned trials; None where none can be told."""
    metric, maximize = sweep.metric.name, sweep.metric.direction == "max"
    smooth = sweep.early_stop.smooth_epochs
    curves = {
        r["key"]: {e: score(h[metric]) for h in r.get("history") or [] if (e := _epoch_of(h)) and metric in h}
        for r in ran
    }
    done = [r["key"] for r in ran if r["status"] == "ok" and curves[r["key"]]]
    pruned = [r["key"] for r in ran if r["status"] == "pruned" and curves[r["key"]]]
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
    return None if worst is None else {**worst, "noise": noise, "pruned_told": told, "pruned": len(pruned)}


def _epochs(result: dict) -> int:
    return sum(1 for h in result.get("history") or [] if _epoch_of(h) is not None)


def _planned(result: dict) -> int | None:
    steps = result.get("steps") or {}
    return steps.get("epochs_planned")


def _epoch_of(entry: dict) -> int | None:
    """A history entry's epoch: fit's logs and JSON lines say "epoch", gpuscout.sweep.report "step"."""
    try:
        return int(entry.get("epoch", entry.get("step")))
    except (TypeError, ValueError):
        return None


def reported_per_epoch(result: dict, metric: str) -> bool:
    """Whether a trial's history holds `metric` at some epoch (what a pruner needs): a script
    that prints or reports it once, at its end, gives none, and nothing can be pruned."""
    return any(_epoch_of(h) is not None and metric in h for h in result.get("history") or [])


def _value_at(result: dict, metric: str, epoch: int) -> float | None:
    for h in result.get("history") or []:
        if _epoch_of(h) == epoch and metric in h:
            return score(h[metric])
    return None
