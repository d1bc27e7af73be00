"""The changes tune makes, one module each (tune/changes/base.py: what a kind holds), found here
(a module with a KIND) and listed in the order their kinds say (ChangeKind.listed). A new change is
a module here, its applier in the child (child/applies/NAME.py, keyed by its settings), its
settings' fields (core/tune_settings.py), and its tests."""

from __future__ import annotations

import importlib
import pkgutil

from gpuscout.core.errors import UsageError
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where


def _kinds() -> list[ChangeKind]:
    """Every kind of this package (its modules' KIND; a helper module has none), in plan order."""
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    return sorted((m.KIND for m in found if hasattr(m, "KIND")), key=lambda k: k.listed)


KINDS: dict[str, ChangeKind] = {k.name: k for k in _kinds()}
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
