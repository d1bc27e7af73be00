"""`gpuscout tune -- COMMAND`: each fix applied to the user's unchanged script, and measured.

The command runs once as the baseline under watch's instrumentation, then once per change that
a run's facts make worth trying (this module: `plan`, which asks each kind of change in
tune/changes/ whether it applies), each change injected at interpreter
start-up through the same hook (child/tune_overrides.py; no file is edited), in rounds on top of
the fastest change so far (tune/search.py), each setting judged against the runs of its
reference beside it (`judged`). Every run is a watch record of its own (`tune_change`,
`applied`), all of one session (`group_id`).

Each run is bounded by the same number of training steps after the first compile: the first
baseline runs TARGET_TRAINING_S of training and its step count is every later run's `--steps`
(or the user's `--steps`), cut into WINDOWS_PER_RUN windows of equal steps, so that every run
has as many windows whatever a change buys. Loss is compared at that equal step count: a change
whose last loss is NaN/inf, or clearly worse than the baseline's, is flagged and never
recommended (mixed_float16 overflowing is the usual case).

The search is bounded as DeepSpeed's autotuner bounds its own: by what the baseline showed (a
change is tried only where its cause was seen) and by memory (a larger batch only where the
measured peak says it fits), and the whole session by --budget-minutes.
"""

from __future__ import annotations

from gpuscout.analysis.untimed import STARVED_UTIL_PCT
from gpuscout.analysis.verdict import INPUT_HIGHLY
from gpuscout.core.errors import UsageError
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Deferred, Plan, Skip
from gpuscout.tune.changes import CHANGES, INPUT_FIRST, KINDS, MORE_WORK_FIRST, SPREADS
from gpuscout.tune.results import PlannedChange, Rule, ScriptPlan, Skipped

# Training time the first baseline runs (after its compile) to set every run's step count: a
# warm-up window and at least 4 steady windows of WINDOW_S even for a change 4x faster.
TARGET_TRAINING_S = 10.0
# Training a round's runs are sized to at their reference's pace (tune/search.py Steps): 8 windows of
# 0.6 s measure a compiled step to a few percent, and a round of six candidates costs a minute, not two
# (on an H100, rounds of 10 s left a debugging-settings ViT at 0.28 of the fix by hand, its third
# round unrun for the budget; docs/benchmarks.md).
ROUND_TRAINING_S = 5.0
WINDOW_S = 0.5
# Every later run has the baseline's steps, cut into this many windows of equal steps: a warm-up
# window and seven steady ones, however fast a change makes the run (a 15x faster jit_compile
# would otherwise leave one window of half a second).
WINDOWS_PER_RUN = 8
# Whole epochs each run trains at least, where the script's epochs are short enough (budget.
# Steps): the first (its compile) and three steady ones, what judging.MIN_EPOCHS pools on a
# candidate's side from its one run; and the most training those may take: longer epochs and the
# runs count steps, judged by their windows (a session of twenty runs of 16 s is 5 of its 6 minutes).
MIN_RUN_EPOCHS = 4
EPOCH_RUN_AT_MOST_S = 16.0
# Fewer steps than this per run and no change can be told from noise: each later run gets at least
# this many even when the baseline's TARGET_TRAINING_S ran fewer (an op-by-op ResNet-50: 2 s a step)
MIN_STEPS = 32


def check_names(names: tuple[str, ...], option: str) -> None:
    unknown = [n for n in names if n not in CHANGES]
    if unknown:
        raise UsageError(f"{option}: unknown change {', '.join(map(repr, unknown))}: choose from {', '.join(CHANGES)}")


def plan(
    baseline: WatchRecord, only: tuple[str, ...] = (), skip: tuple[str, ...] = (), script_batch: int | None = None
) -> Plan:
    """The changes the baseline's facts make worth trying, and why each of the others is not.
    `script_batch`: the batch the script itself trains with, where `baseline` is a setting that
    changed it already (a larger batch is named by its factor over the script's)."""
    main = baseline.main
    out = Plan()
    if main is None or main.custom or not baseline.windows:
        out.skipped.append(Skip("all", "the baseline ran no timed Keras fit step"))
        return out
    for knob, kind in KINDS.items():
        if only and knob not in only:
            continue
        if knob in skip:
            out.skipped.append(Skip(knob, "--skip"))
        elif isinstance(found := kind.plan(baseline, script_batch), str):
            out.skipped.append(Skip(knob, found))
        elif isinstance(found, Deferred):
            out.skipped.append(Skip(knob, found.reason))
            out.deferred += found.changes
        else:
            out.changes += found
    if (baseline.input_wait_share or 0) >= INPUT_HIGHLY:  # the input caps the step: its fixes first
        out.changes.sort(key=lambda c: INPUT_FIRST.index(c.knob) if c.knob in INPUT_FIRST else len(INPUT_FIRST))
    elif baseline.gpu_idle_share is not None and 1 - baseline.gpu_idle_share < STARVED_UTIL_PCT / 100:
        # a GPU idle most of the time waits on the host's calls, not the input: more work per call first
        out.changes.sort(
            key=lambda c: MORE_WORK_FIRST.index(c.knob) if c.knob in MORE_WORK_FIRST else len(MORE_WORK_FIRST)
        )
    if baseline.verdict and baseline.verdict[0].code == "devices_unused":  # the idle devices the largest saving:
        out.changes.sort(key=lambda c: c.knob not in SPREADS)  # spread first: the budget may end the round
    return out


def dry_run(command: str, baseline: WatchRecord | None, only: tuple[str, ...], skip: tuple[str, ...]) -> ScriptPlan:
    """`tune --dry-run`: the first round's plan from the latest stored watch of the script, or,
    without one, when each change is tried. Nothing runs."""
    if baseline is None:
        return ScriptPlan(
            command=command,
            baseline=None,
            changes=[],
            skipped=[],
            rules=[Rule(change=k.name, when=k.rule) for k in KINDS.values()],
        )
    planned = plan(baseline, only, skip)
    return ScriptPlan(
        command=command,
        baseline=baseline.id,
        changes=[PlannedChange(change=c.name, knob=c.knob, why=c.why, line=c.line) for c in planned.changes],
        skipped=[Skipped(change=s.knob, reason=s.reason) for s in planned.skipped],
        rules=[],
    )
