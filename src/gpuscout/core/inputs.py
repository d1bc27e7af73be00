"""Files a user hands gpuscout (a catalog, a sweep file, an export to import, a log to explain),
read with bounds: never more than a limit (`/dev/zero` and a 10 GB file end in a second, with a
line that says so), never bytes that are not text taken for text, never a nesting deeper than a
parser can follow (a RecursionError is a line, not a traceback). Each reader says what the file
should have been, so the line tells the user what to give instead.

What is parsed is bounded too, before anything uses it (`bounded`): a YAML file's aliases are
counted as they expand (607 bytes of nested anchors expand to a billion values), and no string,
integer or count of values is larger than gpuscout could ever need. A key given twice in one
mapping is refused, in YAML and in JSON alike: the parsers would keep the last one silently.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpuscout.core.errors import UsageError

MiB = 2**20
# A nesting deeper than this is refused before a parser recurses into it: far beyond any real
# export (a record nests about 6 deep) or sweep file, far below Python's recursion limit (1,000).
MAX_DEPTH = 200
# The most values a parsed file may hold once its aliases are expanded: a sweep file is a page, an
# export of 10,000 records with their telemetry is tens of millions of values (its 1 GiB bound
# holds it), so YAML's bound is its own (MAX_YAML_VALUES).
MAX_YAML_VALUES = 100_000
# The longest string a file may hold: a record's longest text is a stderr tail (4,000 characters)
# or a command line; 64 Ki characters is far above both, far below what slows a report (a 20 MiB
# workload name took `report` minutes and gigabytes).
MAX_STRING_CHARS = 65_536
# Integers fit SQLite's 64-bit integer (sqlite.org/datatype3.html), which also keeps every
# float() of one finite; Python's own parser refuses past 4,300 digits with a traceback.
MAX_INT = 2**63 - 1


# Read a chunk at a time: a large file is read in a loop that Ctrl-C and SIGTERM stop between chunks.
CHUNK_BYTES = MiB


def read_bytes(path: Path, what: str, max_bytes: int, *, stdin: bool = False) -> bytes:
    """At most `max_bytes` of the regular file `path`, or of standard input when `stdin` and the
    path is `-`; UsageError for anything else (a FIFO nobody writes to, a device, a socket, a
    folder: waiting on one would never end) and for more than `max_bytes`, said before reading a
    file whose size says so."""
    if stdin and str(path) == "-":
        return _read_stream(sys.stdin.buffer, "standard input", what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO without a writer: no wait
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file (give {what})") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket
            raise UsageError(f"{path} is a socket, not a file: give {what}") from None
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{path} is a folder, not {what}")
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "special file"
            )
            dash = " (or - to read standard input)" if stdin else ""
            raise UsageError(f"{path} is a {kind}, not a file: give {what} as a file{dash}")
        raise UsageError(
            f"{path} is larger than {max_bytes / MiB:g} MiB ({st.st_size / MiB:,.0f} MiB), too large "
            f"for {what}: is it the right file?"
        )
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        return _read_stream(handle, str(path), what, max_bytes)


def _read_stream(handle, origin: str, what: str, max_bytes: int) -> bytes:
    """At most `max_bytes` from an open stream, a chunk at a time; UsageError past that."""
    chunks, size = [], 0
    while size <= max_bytes:
        chunk = handle.read(min(CHUNK_BYTES, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise UsageError(
            f"{origin} is larger than {max_bytes / MiB:g} MiB, too large for {what}: is it the right file?"
        )
    return b"".join(chunks)


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


# A quoted string as nesting() skips it (either quote, a backslash escaping the next character, one
# left open running to the end), and what is neither a bracket nor a brace: both taken out by the
# regex engine and the depth summed by numpy, so a 120 MiB export is scanned in C (a character loop
# took 4.7 s on one, a loop over the matches 3.8 s; issue 79.6)
_STRING = re.compile(r""""(?:[^"\\]|\\.)*(?:"|\\?\Z)|'(?:[^'\\]|\\.)*(?:'|\\?\Z)""", re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def nesting(text_: str) -> int:
    """How deep brackets and braces nest in JSON or YAML flow text (strings skipped)."""
    import numpy as np

    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text_)).encode()
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return max(0, int(np.cumsum(steps).max()))


def parse_nested(text_: str, origin: str, what: str, parse: Callable[[str], Any]) -> Any:
    """`parse(text_)` once its nesting is known to be within MAX_DEPTH (and a RecursionError, for
    a nesting the scan could not see, a line too)."""
    if nesting(text_) > MAX_DEPTH:
        raise UsageError(f"{origin} nests deeper than {MAX_DEPTH} levels: not {what}")
    try:
        return parse(text_)
    except RecursionError:
        raise UsageError(f"{origin} nests too deeply to read: not {what}") from None


class Unbounded(ValueError):
    """What a parser hook found out of bounds (a duplicate key, an integer, a constant)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise Unbounded(f"the key {str(key)[:60]!r} is given twice in one object (the last would silently win)")
        seen[key] = value
    return seen


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > 19 or abs(int(digits)) > MAX_INT:
        raise Unbounded(
            f"the integer {digits[:20]}{'…' if len(digits) > 20 else ''} ({len(digits)} digits) is "
            "larger than any figure gpuscout keeps (a 64-bit integer)"
        )
    return int(digits)


def _decimal(text_: str) -> float:
    value = float(text_)
    if not math.isfinite(value):
        raise Unbounded(f"the number {text_[:20]} is too large to be a finite number")
    return value


def _constant(name: str) -> float:
    raise Unbounded(f"{name} is not a number gpuscout reads (JSON has no NaN or Infinity)")


def loads_json(text_: str, origin: str, what: str, *, readings: bool = False) -> Any:
    """JSON with no key twice in an object, integers within 64 bits, no NaN or Infinity, and
    strings within MAX_STRING_CHARS; UsageError names what is wrong. (json.JSONDecodeError for
    text that is not JSON, for the caller to word.) `readings`: NaN, Infinity and -Infinity are
    read as the floats they stand for (an export keeps a diverging training's loss so: the
    record's own types then say where such a value may be)."""

    def parse(t: str) -> Any:
        return json.loads(
            t,
            object_pairs_hook=_pairs,
            parse_int=_integer,
            parse_float=_decimal,
            parse_constant=float if readings else _constant,
        )

    try:
        # no scan before parsing: json's C parser stops a nesting past Python's recursion limit
        # (RecursionError, a line), and bounded() refuses one past MAX_DEPTH
        value = parse(text_)
    except RecursionError:  # past Python's recursion limit, so past MAX_DEPTH too: said as bounded() says it
        raise UsageError(f"{origin} nests deeper than {MAX_DEPTH} levels: not {what}") from None
    except Unbounded as exc:
        raise UsageError(f"{origin}: {exc}: not {what}") from None
    return bounded(value, origin, what, readings=readings)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (`<<` merges may still
    override: that is what they are for)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                except TypeError:  # an unhashable key: the safe loader's own error says so
                    break
                if twice:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {str(key)[:60]!r} is given twice in one mapping (the last would silently win)",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values `node` stands for once every alias in it is expanded (aliases share
    their node, so each distinct node is counted once and its size reused)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise Unbounded("an alias refers to a value that holds it (a value that contains itself)")
    open_.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    open_.discard(key)
    sizes[key] = size = min(size, MAX_YAML_VALUES + 1)  # past the bound the exact count does not matter
    return size


def load_yaml(text_: str, origin: str, what: str) -> Any:
    """YAML (the safe subset) whose aliases expand to at most MAX_YAML_VALUES values, with no key
    twice in a mapping and every value within `bounded`'s bounds. yaml.YAMLError for text that is
    not YAML, for the caller to word with its line."""

    def parse(t: str) -> Any:
        loader = _StrictLoader(t)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            size = _expanded_size(node, {}, set())
            if size > MAX_YAML_VALUES:
                raise Unbounded(f"it expands to more than {MAX_YAML_VALUES:,} values (nested anchors and aliases?)")
            try:
                return loader.construct_document(node)
            except ValueError:  # int() past Python's 4,300 digits, in the loader's own constructor
                raise Unbounded(
                    "it holds an integer of thousands of digits, larger than any figure gpuscout "
                    "keeps (a 64-bit integer)"
                ) from None
        finally:
            loader.dispose()

    try:
        value = parse_nested(text_, origin, what, parse)
    except Unbounded as exc:
        raise UsageError(f"{origin}: {exc}: not {what}") from None
    return bounded(value, origin, what)


# What a file gpuscout reads may hold: JSON's kinds of value. YAML's others (a `!!binary` blob, a
# date, a timestamp, a set) have no place in any file gpuscout reads, and would reach a trial's
# command or a JSON record as something neither can hold.
PLAIN = (str, int, float, bool, type(None), list, tuple, dict)


def bounded(value: Any, origin: str, what: str, *, readings: bool = False) -> Any:
    """`value` (parsed from a file) when it holds JSON's kinds of value only, nests no deeper than
    MAX_DEPTH, and its strings, integers and floats are within bounds; UsageError naming the first
    that is not. Shared containers are looked at once. `readings`: NaN and infinities pass
    (loads_json's). A list of numbers or strings alone is checked whole, in C (map, max): an
    export's telemetry is millions of them (issue 79.6: one value at a time took 9 s of 120 MiB)."""
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if depth >= MAX_DEPTH:
                raise UsageError(f"{origin} nests deeper than {MAX_DEPTH} levels: not {what}")
            parts = [list(item), list(item.values())] if isinstance(item, dict) else [item]
            for values in parts:  # a dict's keys (YAML's may be numbers), its values; a list's items
                kinds = set(map(type, values))
                for kind in kinds & _SCALARS:  # each kind of value checked together
                    alike = values if len(kinds) == 1 else [v for v in values if type(v) is kind]
                    _scalars_bounded(alike, kind, origin, what, readings)
                if kinds - _SCALARS:
                    stack.extend((v, depth + 1) for v in values if type(v) not in _SCALARS)
        else:
            _scalars_bounded([item], type(item), origin, what, readings)
    return value


# The kinds of value a list is checked whole for, one kind a list
_SCALARS = {str, int, float, bool, type(None)}


def _scalars_bounded(values: Any, kind: type, origin: str, what: str, readings: bool) -> None:
    """Values all of `kind`, within bounds (bounded's rules)."""
    if kind is str:
        if max(map(len, values), default=0) > MAX_STRING_CHARS:
            item = next(v for v in values if len(v) > MAX_STRING_CHARS)
            raise UsageError(
                f"{origin} holds a string of {len(item):,} characters ({item[:30]!r}…), more than "
                f"the {MAX_STRING_CHARS:,} any field of {what} can need: not {what}"
            )
    elif kind is int:
        if max(map(abs, values), default=0) > MAX_INT:
            item = next(v for v in values if abs(v) > MAX_INT)
            raise UsageError(
                f"{origin} holds the integer {str(item)[:20]}… ({len(str(abs(item)))} digits), larger "
                f"than any figure gpuscout keeps (a 64-bit integer): not {what}"
            )
    elif kind is float:
        if not readings and not all(map(math.isfinite, values)):
            item = next(v for v in values if not math.isfinite(v))
            raise UsageError(f"{origin} holds {item!r}, not a finite number: not {what}")
    elif not issubclass(kind, PLAIN):
        shown = str(values[0])[:30]
        raise UsageError(
            f"{origin} holds a {kind.__name__} value ({shown!r}: a YAML tag or a date?), which "
            f"no field of {what} takes: quote it to give it as text"
        )
