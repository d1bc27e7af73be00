"""The changes tune makes, one module each (tune/changes/base.py: what a kind holds), in the order
a plan lists them. A new change is a module here with its KIND, a line below, its applier in the
child (child/tune_overrides.py, keyed by its settings), and its tests."""

from __future__ import annotations

from gpuscout.core.errors import UsageError
from gpuscout.tune.changes import (
    augment_in_model,
    augment_inline,
    augment_map,
    batch_size,
    cache,
    data_parallel,
    device_batches,
    jit_compile,
    mixed_precision,
    prefetch,
    process_workers,
    steps_per_execution,
    validation_batch,
    workers,
)
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where

KINDS: dict[str, ChangeKind] = {
    k.name: k
    for k in (
        jit_compile.KIND,
        mixed_precision.KIND,
        steps_per_execution.KIND,
        workers.KIND,
        process_workers.KIND,
        cache.KIND,
        prefetch.KIND,
        device_batches.KIND,
        augment_in_model.KIND,
        augment_inline.KIND,
        augment_map.KIND,
        batch_size.KIND,
        data_parallel.KIND,
        validation_batch.KIND,
    )
}
# The knobs (`--only`, `--skip`, Change.knob)
CHANGES = tuple(KINDS)
# The changes to the input, in the order a round tries them while the input caps the step
# By knob, the knobs a change of it takes the place of, in a setting and in the rounds after it is kept
REPLACES = {name: k.replaces for name, k in KINDS.items() if k.replaces}
INPUT_FIRST = tuple(k.name for k in sorted(KINDS.values(), key=lambda k: k.input_rank or 0) if k.input_rank is not None)


# By knob, the knobs whose change alters what it can buy (ChangeKind.depends_on)
DEPENDS = {name: k.depends_on for name, k in KINDS.items() if k.depends_on}
# The knobs measured first, in a round of their own (ChangeKind.paces)
PACE_FIRST = tuple(name for name, k in KINDS.items() if k.paces)
# The knobs that put more work in each call, in the order a round tries them (ChangeKind.work_rank)
MORE_WORK_FIRST = tuple(
    k.name for k in sorted(KINDS.values(), key=lambda k: k.work_rank or 0) if k.work_rank is not None
)
# The knobs that spread the step over idle devices (ChangeKind.spreads)
SPREADS = tuple(name for name, k in KINDS.items() if k.spreads)
# The knobs tried again on top of themselves (ChangeKind.repeatable)
REPEATABLE = tuple(name for name, k in KINDS.items() if k.repeatable)


def replaced(knobs: set[str]) -> set[str]:
    """The knobs a setting of these knobs has made moot (REPLACES)."""
    return {gone for knob in knobs for gone in REPLACES.get(knob, ())}


def kind(name: str) -> ChangeKind:
    """The kind of change a knob is."""
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(f"unknown change {name!r}: choose from {', '.join(CHANGES)}") from None


__all__ = [
    "CHANGES",
    "DEPENDS",
    "INPUT_FIRST",
    "KINDS",
    "MORE_WORK_FIRST",
    "PACE_FIRST",
    "REPEATABLE",
    "REPLACES",
    "SPREADS",
    "replaced",
    "ChangeKind",
    "FileEdits",
    "Where",
    "kind",
]
