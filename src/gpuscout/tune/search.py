"""The search of `gpuscout tune -- COMMAND`: rounds of changes, each measured against the runs of
the setting it is added to that ran just before and just after it, until nothing more is faster.

A change's value depends on what is fixed before it (mixed precision buys nothing while the input
caps the step, and 1.7x once read-ahead lifts that cap), so one round against one baseline
misses combinations. As DeepSpeed's autotuner does, the search is greedy and bounded: round 1
tries every change the baseline's facts make worth trying; the fastest with significance (and
healthy training) is kept, and round 2 tries the changes the kept setting's own run makes worth
trying on top of it; and so on, until no change is faster or the budget would be overrun.

Runs are interleaved with their reference (the setting the round adds to) every INTERLEAVE
candidates, so each candidate is compared with the reference runs beside it in time, pooled (a
verdict never rests on one pair of runs). When those two reference runs disagree beyond their
intervals the host was noisy: the round's leading candidates are measured again, with the
reference run again after them, before one is called faster (hyperfine's advice: re-measure
before trusting an outlier; pytest-benchmark compares only runs taken together).

Every run goes through `run(config, name)`; this module decides what runs next and reads what the
runs say, and knows nothing about processes, so its tests run it on records made by hand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from gpuscout.record.watch import WatchRecord
from gpuscout.tune import script
from gpuscout.tune.script import Change, Skip

# Candidates between two runs of their reference: each is then at most one run away from one
# reference run and two from the other.
INTERLEAVE = 3
# Leading candidates measured again when the reference runs beside them disagreed.
REMEASURE = 2
# What the final block runs when no change won: the baseline once more (tune/finale.py)
CLOSING_RUNS = 1


@dataclass(frozen=True)
class Config:
    """Changes applied together (none: the baseline)."""

    changes: tuple[Change, ...] = ()

    @property
    def name(self) -> str:
        return "baseline" if not self.changes else "+".join(c.name for c in self.changes)

    @property
    def settings(self) -> dict:
        return {k: v for c in self.changes for k, v in c.settings.items()}

    @property
    def knobs(self) -> set[str]:
        return {c.knob for c in self.changes}

    def plus(self, change: Change) -> "Config":
        return Config(self.changes + (change,))

    def as_change(self) -> Change | None:
        """The setting as one change for a run (None: the unchanged script)."""
        if not self.changes:
            return None
        if len(self.changes) == 1:
            return self.changes[0]
        return Change(self.name, "combined", self.settings, "\n\n".join(c.line for c in self.changes),
                      " + ".join(c.name for c in self.changes))


@dataclass
class Trial:
    """A candidate measured in a round: its runs and the reference runs beside them."""

    round: int
    change: Change
    config: Config
    reference: Config
    runs: list[WatchRecord] = field(default_factory=list)
    beside: list[WatchRecord] = field(default_factory=list)  # the reference's runs before and after
    row: dict = field(default_factory=dict)

    def judge(self, batch_size: int | None) -> dict:
        self.row = script.judged(self.change, self.runs, self.beside, batch_size)
        self.row.update(round=self.round, on=self.reference.name, setting=self.config.name,
                        reference_run_ids=[r.id for r in self.beside], run_ids=[r.id for r in self.runs])
        noise = [n for a, b in zip(self.beside, self.beside[1:]) if (n := script.noisy(a, b))]
        self.row["noisy"] = noise[0] if noise else None
        return self.row

    @property
    def faster(self) -> bool:
        return self.row.get("verdict") == "faster" and bool(self.row.get("healthy"))


@dataclass
class Budget:
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    longest_s: float = 1.0  # the longest run so far: what the next is assumed to take

    def seen(self, record: WatchRecord) -> None:
        self.longest_s = max(self.longest_s, record.duration_s or 0.0)

    def allows(self, runs: int, reserve: int = 0) -> bool:
        return time.monotonic() - self.started + (runs + reserve) * self.longest_s <= self.budget_s


@dataclass
class Outcome:
    path: list[Trial] = field(default_factory=list)  # the changes kept, in order
    trials: list[Trial] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    rounds: int = 0

    @property
    def best(self) -> Config:
        return self.path[-1].config if self.path else Config()


Runner = Callable[[Config, str], WatchRecord]
Planner = Callable[[WatchRecord, set], "script.Plan"]


def search(run: Runner, plan: Planner, probe: WatchRecord, budget: Budget, reserve: int) -> Outcome:
    """Rounds from the baseline's probe run; `reserve`: runs kept for after the search once a
    change wins (the final comparison with the baseline, the patched copy). Until one does, only
    the closing baseline run is kept back: reserving the whole final block before the first
    candidate left a slow script (a PyDataset whose worker processes take 45 s to start and
    train) no candidate at all within its budget (H200, docs/benchmarks.md)."""
    out = Outcome()
    reference, reference_runs, facts = Config(), [probe], probe
    batch = probe.batch_size
    tried: set[str] = set()
    while True:
        planned = plan(facts, reference.knobs)
        if out.rounds == 0:
            out.skipped += planned.skipped
        candidates = [c for c in planned.changes if reference.plus(c).name not in tried]
        if not candidates:
            break
        out.rounds += 1
        trials = _round(run, out.rounds, reference, reference_runs, candidates, budget, reserve, batch, out)
        tried |= {t.config.name for t in trials}
        leaders = sorted((t for t in trials if t.faster), key=lambda t: -t.row["ratio"])
        if any(t.row["noisy"] for t in leaders):
            for trial in leaders[:REMEASURE]:
                if not budget.allows(2, _kept_back(out, reserve)):
                    break
                trial.runs.append(_ran(run, trial.config, f"{trial.config.name} again", budget))
                trial.beside.append(_ran(run, reference, f"{reference.name} again", budget))
                trial.judge(batch)
                trial.row["remeasured"] = True
            leaders = sorted((t for t in leaders if t.faster), key=lambda t: -t.row["ratio"])
        if not leaders:
            break
        kept = leaders[0]
        kept.row["kept"] = True
        out.path.append(kept)
        reference, reference_runs = kept.config, list(kept.runs)
        # the next round plans from the kept setting's own run; whether the input repeats was
        # checked in the probe only
        facts = _with_repeats(kept.runs[-1], probe)
    return out


def _round(run: Runner, number: int, reference: Config, reference_runs: list[WatchRecord], candidates: list[Change],
           budget: Budget, reserve: int, batch: int | None, out: Outcome) -> list[Trial]:
    trials: list[Trial] = []
    waiting: list[Trial] = []  # measured, waiting for the reference run after them
    before = reference_runs[-1]
    for change in candidates:
        if not budget.allows(2, _kept_back(out, reserve)):  # this run and the reference after it
            out.skipped.append(Skip(change.knob, f"{reference.plus(change).name}: the --budget was spent"))
            continue
        trial = Trial(number, change, reference.plus(change), reference)
        trial.runs.append(_ran(run, trial.config, trial.config.name, budget))
        trials.append(trial)
        out.trials.append(trial)
        waiting.append(trial)
        if len(waiting) == INTERLEAVE:
            before = _close(run, reference, before, waiting, budget, batch)
    if waiting:
        _close(run, reference, before, waiting, budget, batch)
    return trials


def _kept_back(out: Outcome, reserve: int) -> int:
    """Runs the final block will need: all of `reserve` once a change is winning or may be (a
    candidate measured and waiting for the reference run after it: three share one, so their
    verdicts come late), else the closing baseline alone."""
    winning = out.path or any(t.faster or not t.beside for t in out.trials)
    return reserve if winning else min(reserve, CLOSING_RUNS)


def _close(run: Runner, reference: Config, before: WatchRecord, waiting: list[Trial], budget: Budget,
           batch: int | None) -> WatchRecord:
    after = _ran(run, reference, f"{reference.name} again", budget)
    for trial in waiting:
        trial.beside = [before, after]
        trial.judge(batch)
    waiting.clear()
    return after


def _ran(run: Runner, config: Config, name: str, budget: Budget) -> WatchRecord:
    record = run(config, name)
    if record.status == "interrupted":
        raise KeyboardInterrupt
    budget.seen(record)
    return record


def _with_repeats(record: WatchRecord, probe: WatchRecord) -> WatchRecord:
    if record.main is None or probe.main is None or record.main.input_repeats is not None:
        return record
    main = record.main.model_copy(update={"input_repeats": probe.main.input_repeats})
    return record.model_copy(update={"fits": [main if f is record.main else f for f in record.fits]})
