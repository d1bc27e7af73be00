"""Several steps in one host call (steps_per_execution), for short steps or a host-bound loop:
8 and 32, each the nearest value that keeps the epoch the script's (tiling)."""

from __future__ import annotations

import math

from gpuscout.analysis.verdict import INPUT_BOUND_SHARE, OUTSIDE_STEP_SHARE
from gpuscout.record.watch import WatchedFit, WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import call_at, set_keywords

# A step shorter than this is worth batching host calls for (steps_per_execution): Keras' own
# guidance puts the overhead of one host round trip per step at milliseconds.
SHORT_STEP_S = 0.025


def steps_per_execution(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if (main.steps_per_execution or 1) > 1:
        return f"already steps_per_execution={main.steps_per_execution}"
    if main.jit_compile is False and main.backend == "jax":  # (tensorflow still runs a tf.function graph)
        return (
            "the step runs op by op (jit_compile=False): batching host calls comes after compiling it "
            "(measured on an H100: 38x from jit_compile, docs/benchmarks.md)"
        )
    host = (r.outside_step_share or 0) >= OUTSIDE_STEP_SHARE or any(
        c.code in ("host_bound", "input_handover") for c in r.verdict
    )
    step = r.step_time_s
    if step is None:
        return "the step's time was not seen"
    # A loop that waits for its input is not left out: part of each wait is the step's hand-over
    # (Keras converts and sends each batch in its own call), which fewer calls shorten. On an H100
    # a generator-fed CNN that waited 56% of the time ran 1.8x by its own clock at 15 steps a call
    # (issue 86, item 8). The step's own time is what is left of it outside that wait.
    wait = r.input_wait_share or 0
    own = step * (1 - wait)
    if own >= SHORT_STEP_S and not host:
        return (
            f"steps of {own * 1000:.0f} ms outside the input's wait, and the loop is not host-bound: one call per "
            "step costs little"
        )
    why = f"steps of {own * 1000:.1f} ms" + (" and a host-bound loop" if host else "")
    if wait >= INPUT_BOUND_SHARE:
        why += f"; the loop waits for input {wait:.0%} of the time, each step's hand-over in it"
    tiles = tiling(main)
    if isinstance(tiles, str):
        return tiles
    values, epoch = tiles
    return [
        Change(
            f"steps_per_execution_{n}",
            "steps_per_execution",
            {"steps_per_execution": n},
            f"model.compile(..., steps_per_execution={n})",
            why + (f"; {n} divides {epoch}" if epoch else ""),
        )
        for n in values
    ]


# The values of steps_per_execution tried: 8 and 32 host calls' worth of steps in one (Keras' guide
# suggests values in the tens), each the nearest that tiles the epoch; never above SPE_MOST.
SPE_TARGETS = (8, 32)


SPE_MOST = 64


def tiling(main: WatchedFit) -> tuple[list[int], str | None] | str:
    """steps_per_execution values that keep the epoch the script's: Keras 3 runs an epoch as
    range(0, steps, steps_per_execution) calls of steps_per_execution steps each
    (trainers/epoch_iterator.py), so from an input that never runs out (a generator, a repeated
    tf.data) a value that does not divide steps_per_epoch trains more steps an epoch (40 at 32 a
    call: 64), and one that does not divide the data's batches ends each epoch early and calls
    on_epoch_end twice; validation_steps likewise. Returns the values and what they divide, or why
    none does."""
    epoch = main.steps_per_epoch or next((e.steps for e in main.epochs), None)
    validation = main.validation_steps
    if not epoch and not validation:  # an input of unknown length, read to its end: any value ends with it
        return list(SPE_TARGETS), None
    common = math.gcd(epoch or 0, validation or 0)
    divisors = [d for d in range(2, min(common, SPE_MOST) + 1) if common % d == 0]
    what = " and ".join(
        part
        for part in (
            f"the epoch's {epoch} steps" if epoch else None,
            f"the validation's {validation} steps" if validation else None,
        )
        if part
    )
    if not divisors:
        return (
            f"no steps_per_execution from 2 to {SPE_MOST} divides {what}: any would change the steps an "
            "epoch trains (Keras runs whole calls of it)"
        )
    values = []
    for target in SPE_TARGETS:
        below = [d for d in divisors if d <= target]
        value = below[-1] if below else divisors[0]
        if value not in values:
            values.append(value)
    return values, what


class StepsPerExecution(ChangeKind):
    name = "steps_per_execution"
    listed = 20
    work_rank = 2
    fewer_calls = True
    rule = "steps under 25 ms, or a host-bound loop (8 and 32, each the nearest that divides the epoch's steps)"

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return steps_per_execution(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        path, line = site(where.sites, "compile", where.root, "compiled the model")
        text = original(path, where.originals)
        value = str(int(change.settings[self.name]))
        return [(path, set_keywords(text, call_at(text, line, "compile"), {self.name: value}))]


KIND = StepsPerExecution()
