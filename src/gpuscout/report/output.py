"""Writing a file a user named (`report --out`, `results export -o`): never over the results store,
never silently over an SQLite file or a file gpuscout did not write, never half a file, and never
in place of something that is not a regular file.

- The store is known by its identity (device and inode), not its name: the same file reached
  through a bind mount, a hard link or a symlink is still the store (and so are its -wal, -shm
  and -journal files), refused with --force or not.
- A file gpuscout wrote is known by its first bytes: the HTML report's generator tag, the
  Markdown report's first-line comment, an export's JSON `gpuscout_version` key or CSV header.
  Anything else that exists is the user's, and is overwritten only with --force.
- A regular file is written under a temporary name in its folder and renamed into place
  (os.replace is atomic on one file system), so an interrupted write leaves the old file whole.
  A symlink is followed: its target is replaced, the link kept.
- What is not a regular file is never replaced. A FIFO, a terminal, /dev/null (/dev/zero,
  /dev/full) and the shell's own descriptors (/dev/stdout, /dev/fd/N) are written as a stream,
  in place; a FIFO nobody reads is refused at once instead of waiting forever. Any other device,
  a socket or a folder is refused with one line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.report.export import CSV_COLUMNS
from gpuscout.store.schema import SQLITE_HEADER

HTML_MARK = '<meta name="generator" content="gpuscout">'
MARKDOWN_MARK = "<!-- written by gpuscout -->"
# How much of an existing file is read to tell who wrote it.
HEAD_BYTES = 4096
# The files SQLite keeps beside a store (sqlite.org/tempfiles.html).
STORE_SIDE_FILES = ("-wal", "-shm", "-journal")
# Character devices a stream may go to: /dev/null, /dev/zero, /dev/full (major 1, minors 3, 5
# and 7; /dev/mem and /dev/port share major 1 and are never written), and terminals: the virtual
# consoles and serial lines (4), /dev/tty and /dev/console (5), pseudo-terminals (136-143).
# Numbers from the kernel's Documentation/admin-guide/devices.txt.
MEMORY_DEVICES = {3, 5, 7}
TERMINAL_MAJORS = {4, 5, *range(136, 144)}
# What the shell's redirections are reached as: the descriptor itself is written.
DESCRIPTOR = re.compile(r"^/(?:dev/fd|proc/self/fd|proc/\d+/fd)/(\d+)$")
STANDARD = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}


@dataclass(frozen=True)
class Output:
    """Where an output goes, once checked: a regular file replaced whole (`file`), or a stream
    written in place (`descriptor`: the shell's, left open; or `stream`: a FIFO or device, opened
    by check_output so that a FIFO without a reader is refused before any work)."""

    given: Path
    file: Path | None = None
    descriptor: int | None = None
    stream: int | None = None


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


def _store_files(store: Path) -> list[Path]:
    return [store, *(store.with_name(store.name + suffix) for suffix in STORE_SIDE_FILES)]


def _identities(store: Path | None) -> set[tuple[int, int]]:
    """(device, inode) of the store and of the files beside it that exist."""
    found = set()
    for path in _store_files(store) if store is not None else []:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISBLK, "block device"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISFIFO, "FIFO")):
        if test(mode):
            return name
    return "special file"


def _stream_device(st: os.stat_result) -> bool:
    if not stat.S_ISCHR(st.st_mode):
        return False
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return (major == 1 and minor in MEMORY_DEVICES) or major in TERMINAL_MAJORS


def _open_stream(path: Path, option: str) -> int:
    """A FIFO or device opened for writing, never created or truncated; a FIFO with no reader
    is refused (opening it would block until one comes)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UsageError(f"{option} {path} is a FIFO that nothing reads: start its reader first (e.g. "
                             f"`cat {path} &`), or give a file") from None
        raise UsageError(f"{option} {path}: cannot open it for writing ({exc.strerror})") from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # a reader is there: wait for it
    return fd


def check_output(path: Path, store: Path | None, force: bool, option: str = "--out", *,
                 needs_file: str | None = None) -> Output:
    """The checked output, or UsageError (exit 2, nothing written) when writing `path` would
    destroy something. `needs_file`: why this output must be a regular file (a Markdown report
    writes its plots beside it), said when it is a stream."""
    try:
        st = os.stat(path)  # through symlinks and /dev/stdout to what would be written
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot look at it ({exc.strerror})") from None
    resolved = Path(os.path.realpath(path))
    if store is not None and (
            (st is not None and (st.st_dev, st.st_ino) in _identities(store))
            or resolved in [Path(os.path.realpath(p)) for p in _store_files(store)]):
        raise UsageError(f"{option} {path} is the results store itself (or a file SQLite keeps beside it), "
                         "whatever path reaches it: gpuscout never writes over it; choose another file")
    descriptor = DESCRIPTOR.match(str(path))
    fd = STANDARD.get(str(path), int(descriptor.group(1)) if descriptor else None)
    if fd is not None or (st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)):
        if needs_file:
            raise UsageError(f"{option} {path} is not a regular file, and {needs_file}: give a file path")
        if fd is not None:
            return Output(path, descriptor=fd)
        if stat.S_ISFIFO(st.st_mode) or _stream_device(st):
            return Output(path, stream=_open_stream(path, option))
        raise UsageError(f"{option} {path} is a {_kind(st.st_mode)}, not a file: gpuscout writes to regular files, "
                         "FIFOs, terminals and /dev/null only; give a file path")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{option} {path} is a folder: give a file name")
    if st is not None and not force:
        if _is_sqlite(path):
            raise UsageError(f"{option} {path} is an SQLite database (a results store?): not overwritten; choose "
                             "another file, or add --force to replace it")
        if not written_by_gpuscout(path):
            raise UsageError(f"{option} {path} exists and gpuscout did not write it: not overwritten; choose another "
                             "file, or add --force to replace it")
    return Output(path, file=resolved)


def write(output: Output, text: str) -> None:
    """`text` to a checked output; UsageError naming the output when it cannot be written
    (a full disk, /dev/full, a reader that went away)."""
    data = text.encode("utf-8")
    try:
        if output.file is not None:
            write_whole(output.file, text)
        elif output.descriptor is not None:
            _write_all(output.descriptor, data)
        else:
            try:
                _write_all(output.stream, data)
            finally:
                os.close(output.stream)
    except OSError as exc:
        raise UsageError(f"cannot write {output.given}: {exc.strerror or exc}") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_whole(path: Path, text: str) -> None:
    """`text` into the regular file `path` whole or not at all (a temporary file beside it, then
    renamed)."""
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
