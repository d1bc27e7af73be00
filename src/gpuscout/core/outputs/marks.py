"""How gpuscout knows a file it wrote: the marks its files start with (an existing file that
carries none is the user's), and the SQLite and rescue documents no output may replace."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from gpuscout.core.errors import UsageError

# The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, section 1.3.1).
SQLITE_HEADER = b"SQLite format 3\x00"
# The key a rescue document (store/rescue.py) carries: it names its store
RESCUE_KEY = "rescued_from"
# How much of an existing file is read to tell who wrote it.
HEAD_BYTES = 4096

# What gpuscout's own files start with: the marks that make an existing file gpuscout's to replace.
HTML_MARK = '<meta name="generator" content="gpuscout">'
MARKDOWN_MARK = "<!-- written by gpuscout -->"
PATCH_MARK = "# written by gpuscout tune"
# An export's CSV header starts so (report/exporters/as_csv.py RUN_COLUMNS; tests/unit/test_outputs.py
# holds them together)
CSV_MARK = "id,kind,created_utc,"
# A folder of gpuscout's own files (a sweep's TensorBoard logs) holds this file, so that replacing
# the folder never removes one the user made.
FOLDER_MARK = ".written-by-gpuscout"
_JSON = re.compile(rb'\A\s*\{\s*"gpuscout_version"')
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _json(head: bytes) -> bool:
    return bool(_JSON.match(head))


def _png(head: bytes) -> bool:  # report/plots.py names gpuscout in the PNG's Software text chunk
    return head.startswith(PNG_SIGNATURE) and b"gpuscout" in head


def _optuna_journal(head: bytes) -> bool:  # Optuna's JournalFileBackend: one JSON operation a line
    return head.startswith(b"{") and b'"op_code"' in head.split(b"\n", 1)[0]


MARKS = {
    "html": lambda head: HTML_MARK.encode() in head,
    "markdown": lambda head: head.startswith(MARKDOWN_MARK.encode()),
    "json": _json,
    "csv": lambda head: head.startswith(CSV_MARK.encode()),
    "patch": lambda head: head.startswith(PATCH_MARK.encode()),
    "png": _png,
    "journal": _optuna_journal,
}
# A file a user names may replace any report or export gpuscout wrote, of whatever kind.
REPORTS = ("html", "markdown", "json", "csv", "patch")


def head(path: Path | str) -> bytes:
    """The first bytes of a regular file (never opening a FIFO or device: that could block or
    consume); empty where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, HEAD_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def is_rescue_document(path: Path) -> bool:
    first = head(path)
    return _json(first) and f'"{RESCUE_KEY}"'.encode() in first


def written_by_gpuscout(path: Path | str, marks: tuple[str, ...] = REPORTS) -> bool:
    first = head(path)
    return any(MARKS[m](first) for m in marks)


def refuse_foreign(path: Path, shown: str, marks: tuple[str, ...], override: str | None) -> None:
    """UsageError unless `path` is a file gpuscout wrote (one of `marks`); an SQLite file is named
    as such. `override`: the option that replaces it anyway, said in the line."""
    then = f", or add {override} to replace it" if override else ""
    if head(path).startswith(SQLITE_HEADER):
        raise UsageError(
            f"{shown} {path} is an SQLite database (a results store?): not overwritten; choose another file{then}"
        )
    if not written_by_gpuscout(path, marks):
        raise UsageError(
            f"{shown} {path} exists and gpuscout did not write it: not overwritten; choose another file{then}"
        )
