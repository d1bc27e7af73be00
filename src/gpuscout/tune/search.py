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

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuscout.record.watch import WatchRecord
from gpuscout.tune import judging
from gpuscout.tune.budget import Budget, Steps
from gpuscout.tune.change import Change, Plan, Skip
from gpuscout.tune.results import Judged

# Candidates between two runs of their reference: each is then at most one run away from one
# reference run and two from the other.
INTERLEAVE = 3
# Changes that multiply the step's pace: measured first, in a round of their own, and made the base
# before the changes whose worth depends on the step they are added to (mixed precision or a batch
# measured on an op-by-op step say nothing of the compiled one; issue 60: 211x from jit_compile on a
# small ViT left op by op, H200).
PACE_FIRST = ("jit_compile",)
# Changes tried again on top of themselves while they keep winning, the later replacing the earlier
# in the setting: a larger batch where the last one paid (x2 and x4 stopped a compiled MLP at 0.41
# of the batch of 1,024 by hand, issue 60), and more workers (or processes) where the input still
# waits (7 threads left an augmenting PyDataset waiting 31% of the time, processes untried).
REPEATABLE = ("batch_size", "workers")
# A candidate is stopped once it has trained this many times its reference's training time, and
# judged on the steps it ran (its windows are of its own steps: a third of them is still four or
# more): a change 7x slower (the augmentation moved into the model on a CPU) ran 76 s of a 3-minute
# budget at the round's count, and left no time for the next candidate.
SLOWER_CUT = 3.0
# ... but never before this much training: below it the cut saves seconds, and a loaded host's
# pause (a collection, another process on 2 cores) can triple a sub-second run (CI cut a compiled
# MLP candidate at 113 of 150 steps whose reference trained 0.4 s).
CUT_FLOOR_S = 10.0
# Leading candidates measured again when the reference runs beside them disagreed.
REMEASURE = 2
# The final block (tune/finale.py): the baseline, the best setting, the baseline again
FINAL_RUNS = 3
# What it runs when no change won: the baseline once more
CLOSING_RUNS = 1
# A best this many times the baseline (its intervals' low ends) is not told from a host's drift (a
# few percent, NOISY_SHARE's tenth at most) by runs taken together: the final block runs none, and
# the best's own run is set against the baseline's run of round 1 (issue 60: on an H100 the ViT left
# op by op spent 30 s on each baseline run, a twelfth of the session, to confirm a 600x)
CLEAR_RATIO = 3.0


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

    def plus(self, change: Change) -> Config:
        kept = tuple(c for c in self.changes if not (c.knob == change.knob and c.knob in REPEATABLE))
        return Config(kept + (change,))

    def as_change(self) -> Change | None:
        """The setting as one change for a run (None: the unchanged script)."""
        if not self.changes:
            return None
        if len(self.changes) == 1:
            return self.changes[0]
        return Change(
            self.name,
            "combined",
            self.settings,
            "\n\n".join(c.line for c in self.changes),
            " + ".join(c.name for c in self.changes),
        )


@dataclass
class Trial:
    """A candidate measured in a round: its runs and the reference runs beside them."""

    round: int
    change: Change
    config: Config
    reference: Config
    steps: int  # the training steps its runs and the reference runs beside them trained
    runs: list[WatchRecord] = field(default_factory=list)
    beside: list[WatchRecord] = field(default_factory=list)  # the reference's runs before and after
    row: Judged | None = None  # its judgement, once the reference run after it ran

    def judge(self, batch_size: int | None) -> Judged:
        self.row = judging.judged(self.change, self.runs, self.beside, batch_size)
        ran = min((r.main.steps for r in self.runs if r.main), default=self.steps)
        if ran < self.steps and any(r.main and r.main.stopped_by_limit for r in self.runs):
            cut = (
                f"stopped at {SLOWER_CUT:g}x its reference's training time: {ran} of {self.steps} steps, "
                "judged on those"
            )
            self.row.note = "; ".join(n for n in (self.row.note, cut) if n)
        self.row.set(
            round=self.round,
            on=self.reference.name,
            setting=self.config.name,
            reference_run_ids=[r.id for r in self.beside],
            run_ids=[r.id for r in self.runs],
        )
        noise = [n for a, b in zip(self.beside, self.beside[1:]) if (n := judging.noisy(a, b))]
        self.row.noisy = noise[0] if noise else None
        return self.row

    @property
    def faster(self) -> bool:
        return self.row is not None and self.row.faster


@dataclass
class Outcome:
    path: list[Trial] = field(default_factory=list)  # the changes kept, in order
    trials: list[Trial] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    rounds: int = 0
    asked: dict[str, int] = field(default_factory=dict)  # run id -> the training steps it was asked for

    @property
    def best(self) -> Config:
        return self.path[-1].config if self.path else Config()

    @property
    def clear(self) -> bool:
        """The changes kept are faster than the baseline by so much (the product of their intervals'
        low ends, CLEAR_RATIO or more) that no drift of the host between runs could make it: the
        final block runs no baseline, and the best's latest run is set against round 1's."""
        return math.prod(t.row.ratio_low or 1.0 for t in self.path) >= CLEAR_RATIO


# (setting, name, training steps[, at_most_s: training seconds it is stopped at]) -> its run
Runner = Callable[..., WatchRecord]
Planner = Callable[[WatchRecord, set], Plan]


def search(run: Runner, plan: Planner, probe: WatchRecord, budget: Budget, reserve: int, steps: Steps) -> Outcome:
    """Rounds from the baseline's probe run; `reserve`: runs kept for after the search once a
    change wins (the final comparison with the baseline, the patched copy). Until one does, only
    the closing baseline run is kept back: reserving the whole final block before the first
    candidate left a slow script (a PyDataset whose worker processes take 45 s to start and
    train) no candidate at all within its budget (H200, docs/benchmarks.md).

    A change that multiplies the pace (PACE_FIRST) is measured in a round of its own first; the
    rest are planned after it from the setting it leaves. The probe itself is never a reference
    run beside a candidate: it ran first, cold (caches, clocks, the compilation cache: 37,856
    samples/s against 49,545 and 57,803 for the runs after it on an H200), and checked whether its
    batches repeat; the baseline runs again, warm, before round 1's first candidate."""
    out = Outcome()
    reference, reference_runs, facts = Config(), [], probe
    batch = probe.batch_size
    tried: set[str] = set()
    while True:
        planned = plan(facts, reference.knobs - set(REPEATABLE))
        if out.rounds == 0:
            out.skipped += planned.skipped
        candidates = [c for c in planned.changes if reference.plus(c).name not in tried]
        if not candidates:
            break
        pace = [c for c in candidates if c.knob in PACE_FIRST and c.knob not in reference.knobs]
        out.rounds += 1
        round_steps = steps.of(budget, reference.name)
        if out.rounds == 1 and not pace and budget.allows([budget.cost("baseline", round_steps)] * (3 + CLOSING_RUNS)):
            # the baseline again, warm, before the first candidate: where the budget still holds it,
            # one candidate, its reference run after it and the closing run. Not before a pace
            # change: what it buys (155x for XLA on the H100) dwarfs a cold run's few percent
            reference_runs.append(_ran(run, reference, "baseline (warm)", budget, round_steps, out))
        trials = _round(
            run,
            out.rounds,
            reference,
            reference_runs,
            pace or candidates,
            budget,
            reserve,
            batch,
            out,
            steps,
            round_steps,
        )
        tried |= {t.config.name for t in trials} | {reference.plus(c).name for c in pace or candidates}
        leaders = sorted((t for t in trials if t.faster), key=lambda t: -t.row.ratio)
        if any(t.row.noisy for t in leaders):
            for trial in leaders[:REMEASURE]:
                if not budget.allows(
                    [
                        budget.cost(trial.config.name, trial.steps),
                        budget.cost(reference.name, round_steps),
                        *_kept_back(out, reserve, budget, steps),
                    ]
                ):
                    break
                # at its own count (a larger batch: its reference's samples), not the round's: a batch
                # of 2,048 run again at the 1,393 steps sized to batch 32 trained 36 s, not 1 s (H100)
                trial.runs.append(_ran(run, trial.config, f"{trial.config.name} again", budget, trial.steps, out))
                trial.beside.append(_ran(run, reference, f"{reference.name} again", budget, round_steps, out))
                trial.judge(batch)
                trial.row.remeasured = True
            leaders = sorted((t for t in leaders if t.faster), key=lambda t: -t.row.ratio)
        if not leaders:
            if pace and len(candidates) > len(pace):
                continue  # the pace change did not win: the others, on the same reference
            break
        kept = leaders[0]
        kept.row.kept = True
        out.path.append(kept)
        reference, reference_runs = kept.config, list(kept.runs)
        # the next round plans from the kept setting's own run; whether the input repeats was
        # checked in the probe only
        facts = _with_repeats(kept.runs[-1], probe)
    return out


def _round(
    run: Runner,
    number: int,
    reference: Config,
    reference_runs: list[WatchRecord],
    candidates: list[Change],
    budget: Budget,
    reserve: int,
    batch: int | None,
    out: Outcome,
    steps: Steps,
    count: int,
) -> list[Trial]:
    trials: list[Trial] = []
    waiting: list[Trial] = []  # measured, waiting for the reference run after them
    # the reference's last run that trained as many steps as this round's will (never the probe)
    before = next((r for r in reversed(reference_runs) if out.asked.get(r.id) == count), None)
    for change in candidates:
        config = reference.plus(change)
        # this run (at its reference's pace) and the reference after it
        if not budget.allows([budget.cost(reference.name, count)] * 2 + _kept_back(out, reserve, budget, steps)):
            out.skipped.append(Skip(change.knob, f"{config.name}: the --budget was spent"))
            continue
        own = steps.at_samples(count, _batch_of(reference, batch), _batch_of(config, batch))
        trial = Trial(number, change, config, reference, own)
        trial.runs.append(
            _ran(run, trial.config, trial.config.name, budget, own, out, at_most_s=_cut_s(budget, reference, count))
        )
        trials.append(trial)
        out.trials.append(trial)
        waiting.append(trial)
        if len(waiting) == INTERLEAVE:
            before = _close(run, reference, before, waiting, budget, batch, count, out)
    if waiting:
        _close(run, reference, before, waiting, budget, batch, count, out)
    return trials


def _batch_of(config: Config, script_batch: int | None) -> int | None:
    return config.settings.get("batch_size") or script_batch


def _kept_back(out: Outcome, reserve: int, budget: Budget, steps: Steps) -> list[float]:
    """What the final block will cost: all of `reserve` runs once a change is winning or may be (a
    candidate measured and waiting for the reference run after it: three share one, so their
    verdicts come late), else the closing baseline alone. Its baseline runs are priced at the
    baseline's pace and count, the best (and the patched copy) at the leading setting's."""
    winning = out.path or any(t.faster or _may_win(t, budget) for t in out.trials)
    base = budget.cost("baseline", steps.base)
    leading = out.path[-1] if out.path else next((t for t in out.trials if t.faster or _may_win(t, budget)), None)
    best = budget.cost(leading.config.name, leading.steps) if leading else base
    if out.clear:  # the best and the patched copy beside it, with --patch (Outcome.clear)
        return [best] * (2 if reserve > FINAL_RUNS else 0)
    runs = reserve if winning else min(reserve, CLOSING_RUNS)
    baselines = min(runs, 2)
    return [base] * baselines + [best] * max(0, runs - baselines)


def _may_win(trial: Trial, budget: Budget) -> bool:
    """A candidate measured and waiting for the reference run after it may win, unless its run was
    already slower than its reference's latest by more than noise (a change 7x slower, priced as
    the best, held back a CPU session's whole final block at its pace and ended the round)."""
    if trial.beside:
        return False
    pace = budget.paces.get(trial.reference.name)
    rate = trial.runs[-1].samples_per_s if trial.runs else None
    return not (rate and pace and pace.samples_per_s and rate < pace.samples_per_s * (1 - judging.NOISY_SHARE))


def _close(
    run: Runner,
    reference: Config,
    before: WatchRecord | None,
    waiting: list[Trial],
    budget: Budget,
    batch: int | None,
    count: int,
    out: Outcome,
) -> WatchRecord:
    after = _ran(run, reference, f"{reference.name} again", budget, count, out)
    for trial in waiting:
        trial.beside = [r for r in (before, after) if r is not None]
        trial.judge(batch)
    waiting.clear()
    return after


def _cut_s(budget: Budget, reference: Config, count: int) -> float | None:
    """The training time a candidate is stopped at: SLOWER_CUT times what its reference's `count`
    steps train for (a batch k times larger trains count / k steps of about k times the time), and
    CUT_FLOOR_S at least."""
    pace = budget.paces.get(reference.name)
    return max(SLOWER_CUT * count * pace.step_s, CUT_FLOOR_S) if pace is not None and pace.step_s else None


def _ran(
    run: Runner, config: Config, name: str, budget: Budget, count: int, out: Outcome, at_most_s: float | None = None
) -> WatchRecord:
    record = run(config, name, count, at_most_s=at_most_s) if at_most_s else run(config, name, count)
    if record.status == "interrupted":
        raise KeyboardInterrupt
    budget.seen(record, config.name)
    out.asked[record.id] = count
    return record


def _with_repeats(record: WatchRecord, probe: WatchRecord) -> WatchRecord:
    """The kept run's facts with what only the probe checked: whether a Python input's batches
    repeat, where a PyDataset spends its time, and each tf.data map's elements (matched by the
    call's file and line)."""
    if record.main is None or probe.main is None:
        return record
    update = {}
    if record.main.input_repeats is None:
        update["input_repeats"] = probe.main.input_repeats
    if record.main.sample_work is None:  # where the PyDataset's __getitem__ spends its time
        update["sample_work"] = probe.main.sample_work
    checked = {(op.op, op.file, op.line): op for op in probe.main.pipeline if op.repeats is not None}
    if checked and record.main.pipeline:
        update["pipeline"] = [
            op.model_copy(
                update={
                    k: getattr(seen, k) for k in ("repeats", "repeats_note", "elements", "element_bytes", "endless")
                }
            )
            if (seen := checked.get((op.op, op.file, op.line))) and op.repeats is None
            else op
            for op in record.main.pipeline
        ]
    if not update:
        return record
    main = record.main.model_copy(update=update)
    return record.model_copy(update={"fits": [main if f is record.main else f for f in record.fits]})
