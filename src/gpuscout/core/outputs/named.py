"""The outputs a user names (`report --out`, `results export -o`, `results salvage -o`, `tune
--patch`) and the standard streams: checked before any work, written whole or as a stream."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.core.outputs.marks import REPORTS, SQLITE_HEADER, head, refuse_foreign
from gpuscout.core.outputs.protected import Protected
from gpuscout.core.outputs.whole import kind, name_fits, replace_whole, write_all

# Character devices a stream may go to: /dev/null, /dev/zero, /dev/full (major 1, minors 3, 5
# and 7; /dev/mem and /dev/port share major 1 and are never written), and terminals: the virtual
# consoles and serial lines (4), /dev/tty and /dev/console (5), pseudo-terminals (136-143).
# Numbers from the kernel's Documentation/admin-guide/devices.txt.
MEMORY_DEVICES = {3, 5, 7}
TERMINAL_MAJORS = {4, 5, *range(136, 144)}
# The shell's redirections as this process reaches them: the descriptor itself is written. Another
# process's /proc/PID/fd/N is a path like any other (its target is judged), never our own N.
DESCRIPTOR = re.compile(r"^/(?:dev/fd|proc/self/fd|proc/(\d+)/fd)/(\d+)$")
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


FULL = 7  # /dev/full's minor: every write fails with ENOSPC (devices.txt)


def always_full(path: Path) -> bool:
    """Whether `path` is /dev/full (by its numbers, whatever its name), where no write ever succeeds."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == FULL


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
            raise UsageError(
                f"{option} {path} is a FIFO that nothing reads: start its reader first (e.g. "
                f"`cat {path} &`), or give a file"
            ) from None
        raise UsageError(f"{option} {path}: cannot open it for writing ({exc.strerror})") from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # a reader is there: wait for it
    return fd


def _descriptor(path: Path) -> int | None:
    """The descriptor of this process that `path` names (-, /dev/stdout, /dev/fd/N, /proc/self/fd/N,
    /proc/OUR_PID/fd/N), or None."""
    text = str(path)
    if text in STANDARD:
        return STANDARD[text]
    found = DESCRIPTOR.match(text)
    if found is None or (found.group(1) is not None and int(found.group(1)) != os.getpid()):
        return None
    return int(found.group(2))


def check_stream(fd: int, protected: Protected, shown: str) -> None:
    """A descriptor of this process that is one of the store's files is refused (the shell's `1<>`
    or `>>` onto the store)."""
    try:
        st = os.fstat(fd)
    except OSError:
        raise UsageError(f"{shown}: descriptor {fd} is not open in this process") from None
    why = protected.why(Path(f"/proc/self/fd/{fd}"), st) if stat.S_ISREG(st.st_mode) else None
    if (
        why is None
        and stat.S_ISREG(st.st_mode)
        and st.st_size
        and head(f"/proc/self/fd/{fd}").startswith(SQLITE_HEADER)
    ):
        why = "is an SQLite database (a results store?)"
    if why is not None:
        raise UsageError(f"{shown} {why}: gpuscout never writes over it; redirect it elsewhere")


def check_output(
    path: Path,
    store: Path | None,
    force: bool,
    option: str = "--out",
    *,
    needs_file: str | None = None,
    new: bool = False,
) -> Output:
    """The checked output a user named, or UsageError (exit 2, nothing written) when writing
    `path` would destroy something. `needs_file`: why it must be a regular file (a Markdown
    report writes its plots beside it), said when it is a stream. `new`: it must not exist (a
    store salvage makes)."""
    protected = Protected(store)
    fd = _descriptor(path)
    if fd is not None:
        if needs_file or new:
            raise UsageError(
                f"{option} {path} is not a regular file, and {needs_file or 'it must be a new file'}: give a file path"
            )
        check_stream(fd, protected, f"{option} {path}:")
        return Output(path, descriptor=fd)
    try:
        st = os.stat(path)  # through symlinks to what would be written
    except (FileNotFoundError, NotADirectoryError):  # absent (a file above it is said below)
        st = None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            name_fits(path, option)
        raise UsageError(f"{option} {path}: cannot look at it ({exc.strerror})") from None
    resolved = Path(os.path.realpath(path))
    why = protected.why(resolved, st)
    if why is not None:
        raise UsageError(f"{option} {path} {why}: gpuscout never writes over it; choose another file")
    if new and (st is not None or path.is_symlink()):
        raise UsageError(f"{option} {path} exists: it names the new file to write, one that does not exist yet")
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{option} {path} is a folder: give a file name")
        if needs_file:
            raise UsageError(f"{option} {path} is not a regular file, and {needs_file}: give a file path")
        if stat.S_ISFIFO(st.st_mode) or _stream_device(st):
            return Output(path, stream=_open_stream(path, option))
        raise UsageError(
            f"{option} {path} is a {kind(st.st_mode)}, not a file: gpuscout writes to regular files, "
            "FIFOs, terminals and /dev/null only; give a file path"
        )
    above = next((a for a in Path(os.path.abspath(path)).parents if os.path.lexists(a)), None)
    if above is not None and not above.is_dir():  # its folder is made when it is written: none may be a file
        raise UsageError(
            f"{option} {path}: {above} is a {kind(os.stat(above).st_mode) if above.exists() else 'link to nothing'}, "
            "not a folder"
        )
    name_fits(resolved, option)
    if st is not None and not force:
        refuse_foreign(path, option, REPORTS, "--force")
    return Output(path, file=resolved)


def write(output: Output, data: str | bytes) -> None:
    """`data` to a checked output; UsageError naming the output when it cannot be written (a full
    disk, /dev/full, a reader that went away, a file put in its place since it was checked)."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if output.file is not None:
            os.makedirs(output.file.parent, exist_ok=True)
            replace_whole(output.file, data)
        elif output.descriptor in (1, 2):  # through Python's stream: a notebook's cell, a test's capture
            stream = sys.stdout if output.descriptor == 1 else sys.stderr
            stream.write(data.decode("utf-8", errors="replace"))
            stream.flush()
        elif output.descriptor is not None:
            write_all(output.descriptor, data)
        else:
            try:
                write_all(output.stream, data)
            finally:
                os.close(output.stream)
    except OSError as exc:
        raise UsageError(f"cannot write {output.given}: {exc.strerror or exc}") from None


def refused_streams(store: Path | None) -> dict[int, str]:
    """Standard output and error, judged as any output is: {descriptor: why} for each that is the
    store or what lives beside it (the caller says so on the other, where that one is safe)."""
    protected, refused = Protected(store), {}
    for fd, name in ((1, "standard output"), (2, "standard error")):
        try:
            os.fstat(fd)
        except OSError:  # closed: nothing is written there
            continue
        try:
            check_stream(fd, protected, name)
        except UsageError as exc:
            refused[fd] = str(exc)
    return refused
