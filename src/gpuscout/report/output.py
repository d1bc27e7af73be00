"""Writing a file a user named (`report --out`, `results export -o`): never over the results store,
never silently over an SQLite file or a file gpuscout did not write, and never half a file.

A file gpuscout wrote is known by its first bytes: the HTML report's generator tag, the Markdown
report's first-line comment, an export's JSON `gpuscout_version` key or CSV header. Anything
else that exists is the user's, and is overwritten only with --force; the store (and its WAL
files) never, --force or not. Every output is written under a temporary name in the same folder
and renamed into place (os.replace is atomic on one file system), so an interrupted write leaves
the old file whole.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.report.export import CSV_COLUMNS
from gpuscout.store.schema import SQLITE_HEADER

HTML_MARK = '<meta name="generator" content="gpuscout">'
MARKDOWN_MARK = "<!-- written by gpuscout -->"
# How much of an existing file is read to tell who wrote it.
HEAD_BYTES = 4096


def written_by_gpuscout(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    return (HTML_MARK in head or head.startswith(MARKDOWN_MARK)
            or head.lstrip().startswith('{\n  "gpuscout_version"') or head.startswith(",".join(CSV_COLUMNS)))


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def check_output(path: Path, store: Path | None, force: bool, option: str = "--out") -> None:
    """UsageError (exit 2, nothing written) when writing `path` would destroy something."""
    if store is not None:
        target = path.resolve()
        guarded = [store.resolve(), *(store.resolve().with_name(store.name + s) for s in ("-wal", "-shm", "-journal"))]
        if target in guarded:
            raise UsageError(f"{option} {path} is the results store itself: gpuscout never writes over it; "
                             "choose another file")
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder: give a file name")
    if not path.exists() or force:
        return
    if _is_sqlite(path):
        raise UsageError(f"{option} {path} is an SQLite database (a results store?): not overwritten; choose another "
                         "file, or add --force to replace it")
    if not written_by_gpuscout(path):
        raise UsageError(f"{option} {path} exists and gpuscout did not write it: not overwritten; choose another "
                         "file, or add --force to replace it")


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all (a temporary file beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777  # a file replaced keeps its permissions
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        mode = 0o666 & ~mask  # a new one gets what open() would give it
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
