"""Errors that end a command with a clear one-line message.

``UsageError`` is bad input (exit code 2): raised before anything runs or is stored.
``RunError`` is a failure after runs have started (exit code 1): what finished is stored.
"""

import re


class UsageError(Exception):
    """Bad input: the CLI prints ``error: <message>`` and exits with code 2."""

    exit_code = 2


class RunError(Exception):
    """Runs had started when this went wrong: the CLI prints ``error: <message>`` and exits 1."""

    exit_code = 1


class UserCodeError(UsageError):
    """The user's own code (a model file) failed: one line; its traceback with `gpuscout --verbose`."""

    def __init__(self, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.traceback_text = traceback_text


# No count, size or index of any option reaches this (2^53: every integer below it is exact as a
# float; cli's MAX_OPTION is the same bound for numeric options)
MAX_WHOLE = 2**53


# One whole number as people type it: an optional sign, then ASCII digits (never "--0", "٣" or 10^30)
WHOLE = re.compile(r"[+-]?[0-9]{1,19}")


def parse_whole_numbers(
    text: str,
    option: str,
    what: str,
    example: str,
    *,
    least: int = 1,
    most: int = MAX_WHOLE,
    distinct: bool = True,
    sort: bool = True,
    separators: str = ",",
) -> tuple[int, ...]:
    """A list of whole numbers from `least` to `most` (each once when `distinct`; sorted when
    `sort`), or a UsageError naming `option`: no empty item (`1,,2`), nothing that is not a whole
    number, nothing out of bounds."""
    shown = text[:40] + ("…" if len(text) > 40 else "")
    for separator in separators[1:]:
        text = text.replace(separator, separators[0])
    parts = [part.strip() for part in text.split(separators[0])]
    if not any(parts):
        raise UsageError(f"{option} {shown!r} names nothing: give {what} like {example}")
    if not all(parts):
        raise UsageError(f"{option} {shown!r} has an empty item between its separators: give {what} like {example}")
    if not all(WHOLE.fullmatch(p) for p in parts):
        raise UsageError(f"{option} takes {what} like {example}, got {shown!r}")
    values = [int(p) for p in parts]
    if any(not least <= v <= most for v in values):
        bound = (
            f"{what} from {least} to {most:,}"
            if most < MAX_WHOLE
            else f"positive {what}"
            if least == 1
            else f"{what} of at least {least}"
        )
        raise UsageError(f"{option} takes {bound}, like {example}; got {shown!r}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if distinct and twice:
        raise UsageError(f"{option} lists {', '.join(map(str, twice))} twice: give {what}, each once, like {example}")
    return tuple(sorted(values)) if sort else tuple(values)


def parse_positive_ints(text: str, option: str, what: str, example: str) -> tuple[int, ...]:
    """A comma list of positive whole numbers (sorted, each once), or a UsageError naming `option`."""
    return parse_whole_numbers(text, option, what, example)


def parse_names(text: str, option: str, example: str) -> tuple[str, ...]:
    """A comma list of names, each once and none empty (`--only ,` names nothing: refused, never
    taken for "all"), or a UsageError naming `option`."""
    names = [part.strip() for part in text.split(",")]
    if not any(names):
        raise UsageError(f"{option} {text!r} names nothing: give names like {example}")
    if not all(names):
        raise UsageError(f"{option} {text!r} has an empty name between its commas: give names like {example}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{option} lists {', '.join(twice)} twice: each once, like {example}")
    return tuple(names)


# TCP's port numbers (RFC 793): 1 to 65535 (0 is no port one can connect to)
MAX_PORT = 65535


def host_port(text: str) -> tuple[str, int] | None:
    """'host:port' as (host, port), or None when it is not one: a host before the last colon and
    a port of 1..65535 after it."""
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or len(port) > 5 or not 1 <= int(port) <= MAX_PORT:
        return None
    return host, int(port)
