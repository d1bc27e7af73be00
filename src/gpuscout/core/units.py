"""Numbers with their units as people read them (None as an em dash): what every floor's text
uses, the verdict's messages as much as the report's tables."""

from __future__ import annotations

DASH = "—"


def number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def about(value: float | None, significant: int = 2) -> str:
    """A figure at the precision it has: `significant` digits, the rest zeros ("390,000" for
    387,293 known to +-50%; a figure's five digits would claim what its band does not)."""
    if value is None:
        return DASH
    if value == 0:
        return "0"
    rounded = float(f"{value:.{significant}g}")
    return f"{rounded:,.0f}" if abs(rounded) >= 10 ** (significant - 1) else f"{rounded:,g}"


def usd(value: float | None) -> str:
    """Dollars with cents below 100 (a 0.15 USD epoch is not '0 $'), whole dollars above; under a
    cent, "<0.01 $" (a training of seconds is not free, issue 62: "cost 0.00 $")."""
    if value is None:
        return DASH
    if 0 < value < 0.005:
        return "<0.01 $"
    return f"{value:,.2f} $" if abs(value) < 100 else f"{value:,.0f} $"


def bytes_(value: int | None) -> str:
    if value is None:
        return DASH
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def seconds(value: float | None) -> str:
    if value is None:
        return DASH
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    if value < 172_800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86_400:,.1f} d"


def percent(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value * 100:.{digits}f}%"


def reading(value: object) -> str:
    """A value of a training's logs as it was: a number to 4 significant digits (NaN and inf as
    themselves: a diverging loss is what it is), a custom metric's array by its size, else its text."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        return str(value)
    if isinstance(value, list):
        return f"[{len(value)} values]"
    if value != value:
        return "NaN"
    return f"{value:.4g}"


def counted(amount: float | int, noun: str, plural: str | None = None) -> str:
    """`amount` and its noun, agreed ("1 trial", "2 trials", "1,024 steps"): issue 78 found
    "1 worker threads" and "1 such curves" in what users read. `plural` for a noun that is not
    made by an s ("1 process", "2 processes")."""
    shown = f"{amount:,}" if isinstance(amount, int) else f"{amount:,g}"
    return f"{shown} {noun if amount == 1 else (plural or noun + 's')}"
