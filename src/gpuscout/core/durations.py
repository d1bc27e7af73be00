"""One grammar for a length of time, on every option and in sweep files (issue 78): a number and its
unit, `20s`, `6m`, `1.5h`, `3d`, or several summed (`1h30m`); a bare number is in the unit the
option has always been documented in (--timeout seconds, --budget-minutes minutes, --deadline
hours), so every command line that worked before means what it meant."""

from __future__ import annotations

import math
import re

from gpuscout.core.errors import UsageError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
WORDS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_PART = r"(?:\d+(?:\.\d*)?|\.\d+)"
_GRAMMAR = re.compile(rf"(?:{_PART}[smhd])+|{_PART}")
_ONE = re.compile(rf"({_PART})([smhd])")
# Ten years: past it no time limit means anything (and a float of seconds stays exact)
MOST_S = 10 * 365 * 86400.0


def seconds(value: str | float | int, what: str, bare: str = "s", most_s: float = MOST_S) -> float:
    """`value` as seconds, > 0 and at most `most_s`: a duration of this grammar, or a bare number in
    the unit `bare` (s, m, h, d); UsageError naming `what` (an option, a sweep file's field)."""
    text = f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    compact = text.strip().lower().replace(" ", "")
    if isinstance(value, bool) or not _GRAMMAR.fullmatch(compact):
        raise UsageError(
            f"{what} must be a duration like 20s, 6m, 1.5h or 3d (a bare number is {WORDS[bare]}), got {text[:40]!r}"
        )
    parts = _ONE.findall(compact) or [(compact, bare)]
    total = sum(float(number) * UNITS[unit] for number, unit in parts)
    if total <= 0:
        raise UsageError(f"{what} must be > 0, got {text[:40]!r}")
    if not math.isfinite(total) or total > most_s:
        raise UsageError(f"{what} {text[:40]} is more than {spoken(most_s)}: give one like 20s, 6m, 1.5h or 3d")
    return total


def spoken(total_s: float) -> str:
    """Seconds as the grammar writes them, the largest whole unit: 360 -> '6m', 5400 -> '1.5h'."""
    for unit in ("d", "h", "m"):
        amount = total_s / UNITS[unit]
        if amount >= 1 and round(amount, 1) == amount:
            return f"{amount:g}{unit}"
    return f"{total_s:g}s"
