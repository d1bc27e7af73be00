"""Files a user hands gpuscout (a catalog, a sweep file, an export to import, a log to explain),
read with bounds: never more than a limit (`/dev/zero` and a 10 GB file end in a second, with a
line that says so), never bytes that are not text taken for text, never a nesting deeper than a
parser can follow (a RecursionError is a line, not a traceback). Each reader says what the file
should have been, so the line tells the user what to give instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from gpuscout.core.errors import UsageError

MiB = 2**20
# A nesting deeper than this is refused before a parser recurses into it: far beyond any real
# export (a record nests about 6 deep) or sweep file, far below Python's recursion limit (1,000).
MAX_DEPTH = 200


def read_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    """At most `max_bytes` of `path` (a file, a device, a pipe); UsageError past that."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not {what}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file (give {what})") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise UsageError(f"{path} is larger than {max_bytes / MiB:g} MiB, too large for {what}: is it the right "
                         "file?")
    return data


def text(data: bytes, origin: str, what: str) -> str:
    """`data` as UTF-8 text; UsageError for bytes that are not (a binary file, NUL bytes)."""
    if b"\x00" in data:
        raise UsageError(f"{origin} is not a text file (it holds NUL bytes): not {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{origin} is not a text file (byte {exc.start} is not UTF-8): not {what}") from None


def read_text(path: Path, what: str, max_bytes: int) -> str:
    return text(read_bytes(path, what, max_bytes), str(path), what)


def nesting(text_: str) -> int:
    """How deep brackets and braces nest in JSON or YAML flow text (strings skipped)."""
    depth = deepest = 0
    in_string, escaped, quote = False, False, ""
    for char in text_:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                in_string = False
        elif char in "\"'":
            in_string, quote = True, char
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_nested(text_: str, origin: str, what: str, parse: Callable[[str], Any]) -> Any:
    """`parse(text_)` once its nesting is known to be within MAX_DEPTH (and a RecursionError, for
    a nesting the scan could not see, a line too)."""
    if nesting(text_) > MAX_DEPTH:
        raise UsageError(f"{origin} nests deeper than {MAX_DEPTH} levels: not {what}")
    try:
        return parse(text_)
    except RecursionError:
        raise UsageError(f"{origin} nests too deeply to read: not {what}") from None


def loads_json(text_: str, origin: str, what: str) -> Any:
    return parse_nested(text_, origin, what, json.loads)
