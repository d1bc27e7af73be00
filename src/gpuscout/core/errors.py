"""Errors that end a command with a clear one-line message.

``UsageError`` is bad input (exit code 2): raised before anything runs or is stored.
``RunError`` is a failure after runs have started (exit code 1): what finished is stored.
"""


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


def parse_positive_ints(text: str, option: str, what: str, example: str) -> tuple[int, ...]:
    """A comma list of positive whole numbers (sorted, each once), or a UsageError naming `option`."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{option} takes {what} like {example}, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{option} takes positive {what} like {example}, got {text!r}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise UsageError(f"{option} lists {', '.join(map(str, twice))} twice: each once, like {example}")
    return tuple(sorted(values))


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
