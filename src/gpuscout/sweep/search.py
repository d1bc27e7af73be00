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

from gpuscout.core.errors import UsageError
from gpuscout.sweep import pruning
from gpuscout.sweep.expansion import Trial, trial_key
from gpuscout.sweep.spec import SweepFile, values_or_range

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
    return pruning.rungs_until(sweep.early_stop, epochs)
