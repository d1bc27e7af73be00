"""After the search: the best setting against the baseline run again on both sides of it (the
total a user gets, from runs taken together), the patched copy beside it, what is left, and the
session's report."""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import dataclass

from gpuscout.analysis import repeats
from gpuscout.analysis.device_causes import FP16_CC, precision_of
from gpuscout.analysis.untimed import STARVED_UTIL_PCT
from gpuscout.analysis.verdict import INPUT_HIGHLY
from gpuscout.core.provenance import utc_now
from gpuscout.core.spec import Precision
from gpuscout.executor import scratch
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import judging, search
from gpuscout.tune import patch as patches
from gpuscout.tune.budget import Budget, Steps
from gpuscout.tune.changes import augment_in_model as augment
from gpuscout.tune.results import Judged, PatchMade, Skipped, TuneScriptReport
from gpuscout.tune.trials import Config, Outcome

# The final block: the baseline, the best setting, the baseline again (and the patched copy
# between them, with --patch).
FINAL_RUNS = search.FINAL_RUNS
# Verdicts of a change that bought nothing: its advice is not given again in what is left
NOT_FASTER = ("slower", "no significant difference")
# A remainder worth saying: the best setting still waits on input or the host this share of the time
LEFT_SHARE = INPUT_HIGHLY  # 20%


@dataclass
class Final:
    before: WatchRecord | None  # the baseline run before the best (round 1's: Outcome.clear)
    after: WatchRecord | None
    best: WatchRecord | None = None
    copy: WatchRecord | None = None
    patch: patches.Patch | None = None
    copy_note: str | None = None


def measure(run, found: Outcome, session, budget: Budget, steps: Steps) -> Final:
    """baseline, best, [patched copy], baseline: every comparison with the two baseline runs, the
    baseline at its own count of steps and the best at the one its round ran (their speeds
    compare as samples/s; their losses were compared in the rounds, where they compare).

    Each run starts only where the --budget-minutes still holds it, and the block gives way in
    this order: the closing baseline run (the one before stands for both), then the best's own
    run (its latest, in its round, set against round 1's baseline runs: one change kept in round 1
    was judged against them already), then the patched copy (the diff is still written, and the
    report says it was not run). A path kept CLEAR_RATIO past the baseline runs no block: its
    best's latest run against round 1's baseline run (with --patch, the best run again and the
    copy beside it, so the two are compared, not the host's drift since the best's round: a busy
    CI moved a 13x cache 10% in two minutes)."""
    best_steps = found.path[-1].steps if found.path else steps.base
    base_s, best_s = budget.cost("baseline", steps.base), budget.cost(found.best.name, best_steps)
    copy = session.patch is not None
    if not found.path:  # nothing to compare: once is enough to see whether the host drifted
        if budget.allows([base_s]):
            before = run(Config(), "baseline again", steps.base)
            return Final(before=before, after=before)
        last = next((r for t in reversed(found.trials) for r in reversed(t.beside)), None) or session.probe
        return Final(before=last, after=last)
    round_one = found.path[0].beside[-1]  # round 1's reference is the baseline
    if found.clear:
        final = Final(before=round_one, after=round_one, best=found.path[-1].runs[-1])
        if copy and budget.allows([best_s] * 2):
            final.best = run(found.best, f"{found.best.name} (best)", best_steps)
        if copy:
            final.patch, final.copy, final.copy_note = _patched_copy(session, found, run, best_steps, budget, best_s)
        return final
    if not budget.allows([base_s, best_s] + [best_s] * copy):  # round 1's baseline runs, the best's latest run
        kept = found.path[-1]
        final = Final(before=found.path[0].beside[0], after=round_one, best=kept.runs[-1])
        if copy:
            final.patch, final.copy, final.copy_note = _patched_copy(session, found, run, best_steps, budget, best_s)
        return final
    before = run(Config(), "baseline again", steps.base)
    final = Final(before=before, after=before)
    final.best = run(found.best, f"{found.best.name} (best)", best_steps)
    if copy:
        final.patch, final.copy, final.copy_note = _patched_copy(session, found, run, best_steps, budget, best_s)
    if budget.allows([base_s]):
        final.after = run(Config(), "baseline again", steps.base)
    return final


def _patched_copy(session, found: Outcome, run, count: int, budget: Budget, cost_s: float):
    """The diff of the best setting, and a run of the script's copy with it applied (no change
    injected): what a user who applies the patch gets; run where the budget holds it (`cost_s`)."""
    changes = list(found.best.changes)  # a batch kept twice: the later one only (trials.REPEATABLE)
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


def left(
    best: WatchRecord | None,
    probe: WatchRecord,
    kept: set[str],
    slower: tuple[str, ...] = (),
    skipped: dict[str, str] | None = None,
) -> str:
    """What the best setting still waits on, the most a fix there could buy, and what would buy it:
    the input or the host where they hold it LEFT_SHARE of the time, else a GPU busy less than a
    starved one's share, else float32 on tensor cores that mixed precision was not kept for, else
    the step's compute, with its shares: always said (issue 60: 'left' was empty beside a GPU 17%
    busy). `slower`: the changes measured no faster, whose advice is not given again (processes for
    a GIL-bound PyDataset ran 0.42x on a 16-core H100 host); `skipped`: by knob, why a change was
    not tried or not kept (it changes the training): advice for one says so, never just the change
    (issue 74: "left: ... fewer host calls (steps_per_execution)" beside "not tried:
    steps_per_execution: ...")."""
    r = best or probe
    wait, outside = r.input_wait_share or 0, r.outside_step_share or 0
    if max(wait, outside) < LEFT_SHARE:
        return _device_left(r, kept)
    share, what = (wait, "input") if wait >= outside else (outside, "the loop's host work between steps")
    most = 1 / (1 - share)
    main = r.main
    if what == "input":
        keep = repeats.keepable(probe.main, probe.env.host_memory_bytes) if probe.main else "not checked"
        if "cache" not in kept and isinstance(keep, repeats.Keepable):
            how = f"the batches repeat ({keep.evidence}): make them once and keep them"
        elif "cache" in kept:  # nothing is made any more: what waits is handing kept batches over
            how = (
                "the batches are kept; what is left is Keras handing each over: fewer, larger steps (a larger "
                "batch) or the input moved to the device once"
            )
        elif "augment_map" in kept:  # the map's per-element work is on the device now
            how = (
                "the map's augmentation runs in the model now; what waits is the rest of the pipeline: its other "
                "maps in parallel (num_parallel_calls=tf.data.AUTOTUNE), a cache() of what repeats, prefetch"
            )
        elif kept & {"augment_in_model", "augment_inline"}:  # the per-image work is on the device now
            how = (
                "the augmentation runs in the model now; what waits is the rest of __getitem__ (gathering each "
                "batch) and Keras handing it over: fewer, larger batches from the PyDataset, or its images moved to "
                "the device once and sliced there"
            )
        elif "process_workers" in kept:  # made outside the GIL now: what waits is their pace and the hand-over
            how = (
                "the PyDataset's batches are made in worker processes; what waits is their pace (more of them, "
                "where the host has idle cores) and handing each batch over: the per-sample work moved into the "
                "model (Keras preprocessing layers, on the device), or fewer, larger batches"
            )
        elif main is not None and main.input_type == "PyDataset" and not main.input_multiprocessing:
            measured = next((name for name in slower if name.startswith("process_workers_")), None)
            how = (
                "the PyDataset's work runs in threads under the GIL, and worker processes measured no faster "
                f"({measured}: each batch is handed over at a cost of its own): the per-sample work "
                "moved into the model (Keras preprocessing layers, on the device) or written as array operations"
                if measured
                else "the PyDataset's work runs in threads under the GIL: worker processes, "
                "or the work moved into the model"
            )
            work = probe.main.sample_work if probe.main else None
            if work is not None:  # the exact lines (issue 60): what to move, by hand where tune could not
                how += f"; in __getitem__, {augment.hot_lines(work)}"
        elif main is not None and main.input_type == "generator":
            how = "one Python thread makes every batch: a PyDataset with worker processes, or tf.data"
        else:
            how = "a faster pipeline: its per-batch work in parallel (tf.data map with AUTOTUNE), or done once"
    else:
        how = _host_left(kept, slower, skipped or {})
    return (
        f"the best setting still waits on {what} {share:.0%} of the time: a fix there could buy at most "
        f"{most:.2f}x more; {how}"
    )


def _host_left(kept: set[str], slower: tuple[str, ...], skipped: dict[str, str]) -> str:
    """What the loop's host work between steps is left to, given what steps_per_execution did."""
    calls = "less work in callbacks and between steps"
    if "steps_per_execution" in kept:
        return f"steps_per_execution is kept; what is left is {calls} (Keras' own, a callback's)"
    measured = next((name for name in slower if name.startswith("steps_per_execution")), None)
    if measured:
        return f"fewer host calls measured no faster ({measured}): {calls}"
    if "steps_per_execution" in skipped:
        return f"{calls}; fewer host calls (steps_per_execution) were {skipped['steps_per_execution']}"
    return f"fewer host calls (steps_per_execution) or {calls}"


def _device_left(r: WatchRecord, kept: set[str]) -> str:
    """What holds a setting back on the device, where the host does not: a GPU that idles, a step
    in float32 on tensor cores, else the step's own compute, with the shares measured."""
    main = r.main
    if r.gpu_idle_share is not None and 1 - r.gpu_idle_share < STARVED_UTIL_PCT / 100:
        busy = 1 - r.gpu_idle_share
        batch = f" at batch {r.batch_size}" if r.batch_size else ""
        return (
            f"the GPU is busy {busy:.0%} of the time{batch}: more work per step (a larger batch, "
            "steps_per_execution) or a faster host loop would give it more; at most "
            f"{1 / max(busy, 0.01):.1f}x where the step scales with it"
        )
    if (
        main is not None
        and r.gpu is not None
        and precision_of(main.precision_policy) is Precision.fp32
        and "mixed_precision" not in kept
        and r.gpu.compute_capability
        and float(r.gpu.compute_capability) >= FP16_CC
    ):
        return (
            f"the step runs in float32 on a GPU with tensor cores (compute capability {r.gpu.compute_capability}"
            "): mixed precision was not kept, or not measured within the budget"
        )
    shares = f"input wait {r.input_wait_share or 0:.0%}, host work between steps {r.outside_step_share or 0:.0%}"
    if r.gpu_idle_share is not None:
        return (
            f"the step's own compute: the GPU is busy {1 - r.gpu_idle_share:.0%} of the time ({shares}); "
            "a faster GPU or fewer FLOPs per sample is what is left"
        )
    return f"the step's own compute ({shares}): a GPU, or fewer FLOPs per sample, is what is left"


def report(
    session, found: Outcome, final: Final, probe: WatchRecord, steps: Steps, records: list[WatchRecord], budget: Budget
) -> TuneScriptReport:
    batch = probe.batch_size
    beside = [final.before] if final.before is final.after else [final.before, final.after]
    rows = [t.row for t in sorted(found.trials, key=lambda t: (t.round, -(t.row.ratio or 0)))]
    best = (
        judging.judged(found.best.as_change(), [final.best], beside, batch, found.best.settings)
        if final.best
        else found.path[0].row.model_copy()
        if found.path
        else None
    )  # round 1's judgement, where the budget ended
    copy = (
        judging.judged(found.best.as_change(), [final.copy], beside, batch, found.best.settings) if final.copy else None
    )
    if best and copy:
        copy.change = "patched copy"
        if (copy.note or "").startswith("nothing in this script to apply"):
            # the copy has the change written in it: nothing is injected into it
            copy = Judged.model_validate(copy.model_dump(exclude={"note"}, exclude_unset=True))
        apart = _disagreement(best, copy, drift([r for r in records if r is not final.copy]))
        copy.agrees = apart is None
        if apart and not final.copy_note:
            final.copy_note = f"the patched copy does not do what the injected changes did: {apart}"
    kept = found.best.knobs  # a pair kept (search._pairs) names both its knobs
    not_faster = tuple(t.change.name for t in found.trials if t.row.verdict in NOT_FASTER)
    first = probe if final.after is final.before else final.before  # the baseline run before the last one
    return TuneScriptReport(
        session=session.context.group_id,
        created_utc=utc_now(),
        command=session.command.given,
        workload=session.command.workload,
        steps=steps.base,
        epoch_steps=None if session.no_epochs else steps.epoch,
        no_epochs=session.no_epochs,
        baseline=judging.row(None, probe, probe),
        baseline_again=judging.row(None, final.after, first),
        noisy=judging.noisy(first, final.after),
        rows=rows,
        # the script's own training diverged: what every speed figure then measures is said first
        diverged=next((c for c in probe.verdict if c.code == "loss_not_finite"), None),
        path=[t.change.name for t in found.path],
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
        else None,
        diff=final.patch.diff(session.root) if final.patch is not None else None,
        skipped=[Skipped(change=s.knob, reason=s.reason) for s in found.skipped],
        summary=summary(found, best),
        left=left(
            final.best or (found.path[-1].runs[-1] if found.path else None),
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


def _disagreement(best: Judged, copy: Judged, drift: float) -> str | None:
    """Why the patched copy does not do what the injected changes did, or None where it does: it
    trains as many steps an epoch (and, against the baseline, the same training), and its figure
    is the best's within the two figures' noise: their intervals overlap, or they are as close as
    two runs of one setting are on this host (`drift`). By the same clock: the epochs' where both
    have them."""
    if copy.changes_training:
        return copy.changes_training
    if best.epoch_steps and copy.epoch_steps and best.epoch_steps != copy.epoch_steps:
        return f"it trains {copy.epoch_steps:,} steps an epoch where the injected changes trained {best.epoch_steps:,}"
    same_clock = best.clock == copy.clock
    if same_clock:
        mine, theirs = (
            (copy.samples_per_s, copy.ci95_low, copy.ci95_high),
            (
                best.samples_per_s,
                best.ci95_low,
                best.ci95_high,
            ),
        )
    else:  # against the same baseline runs: their speed-ups
        mine, theirs = (copy.ratio, copy.ratio_low, copy.ratio_high), (best.ratio, best.ratio_low, best.ratio_high)
    if not mine[0] or not theirs[0]:
        return "its speed could not be read"
    apart = abs(mine[0] / theirs[0] - 1)
    if apart <= drift or (None not in (*mine, *theirs) and mine[1] <= theirs[2] and theirs[1] <= mine[2]):
        return None
    shown = (lambda v: f"{v:,.0f} samples/s") if same_clock else (lambda v: f"{v:.2f}x")
    return (
        f"{shown(mine[0])} against {shown(theirs[0])}, {apart:.0%} apart, beyond both intervals and the "
        f"spread of two runs of one setting here ({drift:.0%})"
    )


def summary(found: Outcome, best: Judged | None) -> str:
    if not found.path:
        return "no change was faster with significance against the baseline runs beside it"
    path = " -> ".join(["baseline", *("+" + t.change.name for t in found.path)])
    if best is None or best.ratio is None:
        return f"kept {path}"
    interval = f" [{best.ratio_low:.2f}-{best.ratio_high:.2f}]" if best.ratio_low is not None else ""
    against = (
        "round 1's baseline run (too far past it for drift to matter)" if found.clear else "the baseline run beside it"
    )
    clock = "by whole epochs" if best.ratio_clock == "epochs" else "by the training steps' windows"
    return f"{path}: {best.ratio:.2f}x{interval} over {against} ({best.verdict}, {clock})"
