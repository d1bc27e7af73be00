"""The one door every byte gpuscout writes outside its store goes through: the files a user names
(`report --out`, `results export -o`, `tune --patch`, `results salvage -o`), the standard streams,
and every file a verb makes beside them (a Markdown report's plots, a sweep's folder with its
summary, logs and TensorBoard files, tune's session report, the store's rescue files and backups).
One set of rules, whatever writes:

1. **Never the store.** The store is known by identity (device and inode), not by name: reached
   through a symlink, a hard link or a bind mount it is still the store. So are the files SQLite
   keeps beside it (-wal, -shm, -journal) and the rescue files gpuscout saves beside it
   (`STORE.unsaved-*.json`: the only copy of what the store could not take), existing or not:
   a name is judged by its folder's identity and its own name, so no spelling of the folder and
   no mount of it reaches them. A rescue document is also known by its content, wherever it lies.
   None of these is ever written, with --force or not; neither is standard output or error when
   it is one of them (`1<> store.sqlite`, `>> store.sqlite`: fstat(1) is judged the same way).
2. **Never what is not a regular file, replaced.** A FIFO, a terminal and /dev/null, /dev/zero,
   /dev/full are written as streams, in place (a FIFO nobody reads is refused at once rather than
   waited on forever); the shell's own descriptors (-, /dev/stdout, /dev/fd/N, /proc/self/fd/N)
   are written in place; any other device, a socket or a folder is refused with one line.
3. **Never through a link out of the folder.** A file the user named may be a symlink: its target
   is judged and replaced, the link kept. Inside a folder gpuscout makes for its own files, nothing
   is followed: a symlink or a hard link (a second name of another file) in a file's place is refused.
4. **Never over what gpuscout did not write, without --force.** A file gpuscout wrote is known by
   its first bytes (`MARKS`); anything else that exists is the user's. An SQLite file is named as such.
5. **Whole or not at all.** A regular file is written under a temporary name in its own folder (a
   name that fits the file system's limit, however long the final one) and renamed into place; an
   interrupted write leaves the old file as it was. A file that must be new is created exclusively.

Each refusal is a UsageError: one line, exit 2, before the work where it can be known before.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import re
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuscout.core.errors import UsageError

# The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, section 1.3.1).
SQLITE_HEADER = b"SQLite format 3\x00"
# The files SQLite keeps beside a database (sqlite.org/tempfiles.html).
STORE_SIDE_FILES = ("-wal", "-shm", "-journal")
# A rescue file's name beside its store (store/rescue.py), and the key its document carries.
RESCUE_SUFFIX = re.compile(r"\.unsaved-.*\.json(\.partial)?$")
RESCUE_KEY = "rescued_from"
# How much of an existing file is read to tell who wrote it.
HEAD_BYTES = 4096

# What gpuscout's own files start with: the marks that make an existing file gpuscout's to replace.
HTML_MARK = '<meta name="generator" content="gpuscout">'
MARKDOWN_MARK = "<!-- written by gpuscout -->"
PATCH_MARK = "# written by gpuscout tune"
# An export's CSV header starts so (report/export.py CSV_COLUMNS; tests/unit/test_outputs.py holds them together)
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


STORE_ITSELF = "is the results store itself (or a file SQLite or gpuscout keeps beside it)"


class Protected:
    """The store and what lives beside it: what no output may ever be."""

    def __init__(self, store: Path | None) -> None:
        self.store = Path(store) if store is not None else None
        self.identities: set[tuple[int, int]] = set()
        self.folder: tuple[int, int] | None = None
        if self.store is None:
            return
        for path in self._side_paths():
            try:
                st = os.stat(path)
            except OSError:
                continue
            self.identities.add((st.st_dev, st.st_ino))
        try:
            st = os.stat(self.store.parent)
            self.folder = (st.st_dev, st.st_ino)
        except OSError:
            pass

    def _side_paths(self) -> list[Path]:
        base = self.store
        try:  # (a path past the file system's limits has none: os.path.isdir says False)
            rescues = sorted(base.parent.glob(glob.escape(base.name) + ".unsaved-*.json")) \
                if os.path.isdir(base.parent) else []
        except OSError:
            rescues = []
        return [base, *(base.with_name(base.name + s) for s in STORE_SIDE_FILES), *rescues]

    def why(self, path: Path, st: os.stat_result | None) -> str | None:
        """Why `path` (`st`: what it is, through links) must never be written, or None."""
        if st is not None and (st.st_dev, st.st_ino) in self.identities:
            return f"{STORE_ITSELF}, whatever path reaches it"
        if self.store is not None and self.folder is not None:
            try:
                parent = os.stat(path.parent)
            except OSError:
                parent = None
            if parent is not None and (parent.st_dev, parent.st_ino) == self.folder:
                name, store = path.name, self.store.name
                if name in {store + s for s in STORE_SIDE_FILES}:
                    return f"{STORE_ITSELF}: the name of one SQLite keeps beside it, which it would take for its own"
                if name.startswith(store) and RESCUE_SUFFIX.search(name[len(store):]):
                    return f"{STORE_ITSELF}: the name of its rescue file, the only copy of what it could not store"
        if st is not None and stat.S_ISREG(st.st_mode) and _rescue_document(path):
            return ("is a rescue file (records a store could not take, the only copy): `gpuscout results import` "
                    "it, then remove it")
        return None


def _head(path: Path | str) -> bytes:
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


def _rescue_document(path: Path) -> bool:
    head = _head(path)
    return _json(head) and f'"{RESCUE_KEY}"'.encode() in head


def written_by_gpuscout(path: Path | str, marks: tuple[str, ...] = REPORTS) -> bool:
    head = _head(path)
    return any(MARKS[m](head) for m in marks)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISBLK, "block device"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "folder"),
                       (stat.S_ISLNK, "symbolic link")):
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


def _name_fits(path: Path, option: str) -> None:
    """A name the file system can hold (NAME_MAX bytes, 255 on Linux's file systems)."""
    limit = _name_max(path.parent)
    if len(os.fsencode(path.name)) > limit:
        raise UsageError(f"{option} {str(path)[:80]}…: the name is {len(os.fsencode(path.name))} bytes, longer than "
                         f"the {limit} this file system allows; give a shorter one")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder if folder.exists() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


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
    if why is None and stat.S_ISREG(st.st_mode) and st.st_size and _head(f"/proc/self/fd/{fd}").startswith(
            SQLITE_HEADER):
        why = "is an SQLite database (a results store?)"
    if why is not None:
        raise UsageError(f"{shown} {why}: gpuscout never writes over it; redirect it elsewhere")


def check_output(path: Path, store: Path | None, force: bool, option: str = "--out", *,
                 needs_file: str | None = None, new: bool = False) -> Output:
    """The checked output a user named, or UsageError (exit 2, nothing written) when writing
    `path` would destroy something. `needs_file`: why it must be a regular file (a Markdown
    report writes its plots beside it), said when it is a stream. `new`: it must not exist (a
    store salvage makes)."""
    protected = Protected(store)
    fd = _descriptor(path)
    if fd is not None:
        if needs_file or new:
            raise UsageError(f"{option} {path} is not a regular file, and {needs_file or 'it must be a new file'}: "
                             "give a file path")
        check_stream(fd, protected, f"{option} {path}:")
        return Output(path, descriptor=fd)
    try:
        st = os.stat(path)  # through symlinks to what would be written
    except FileNotFoundError:
        st = None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            _name_fits(path, option)
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
        raise UsageError(f"{option} {path} is a {_kind(st.st_mode)}, not a file: gpuscout writes to regular files, "
                         "FIFOs, terminals and /dev/null only; give a file path")
    above = next((a for a in resolved.parents if os.path.lexists(a)), None)
    if above is not None and not above.is_dir():  # its folder is made when it is written: none may be a file
        raise UsageError(f"{option} {path}: {above} is a file, not a folder")
    _name_fits(resolved, option)
    if st is not None and not force:
        _not_foreign(path, option, REPORTS, "--force")
    return Output(path, file=resolved)


def _not_foreign(path: Path, shown: str, marks: tuple[str, ...], override: str | None) -> None:
    then = f", or add {override} to replace it" if override else ""
    if _head(path).startswith(SQLITE_HEADER):
        raise UsageError(f"{shown} {path} is an SQLite database (a results store?): not overwritten; choose another "
                         f"file{then}")
    if not written_by_gpuscout(path, marks):
        raise UsageError(f"{shown} {path} exists and gpuscout did not write it: not overwritten; choose another "
                         f"file{then}")


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


def replace_whole(path: Path, data: str | bytes) -> None:
    """`data` into the regular file `path` whole or not at all: a temporary file made exclusively
    beside it (never through a link), then renamed over it (a link in `path`'s place is replaced,
    not followed). The file keeps its permissions; a new one gets what open() would give it."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode & 0o777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        mode = 0o666 & ~mask
    fd, temporary = _temporary(path)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _temporary(path: Path) -> tuple[int, Path]:
    """A new file beside `path` for its content: `.NAME.RANDOM.partial`, NAME cut so that the whole
    fits the file system's limit on a name."""
    room = _name_max(path.parent) - len(".") - len(".12345678.partial")
    stem = os.fsencode(path.name)[:room].decode("utf-8", errors="ignore")
    for _ in range(100):
        temporary = path.with_name(f".{stem}.{secrets.token_hex(4)}.partial")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), temporary
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free temporary name beside {path}")


# -- a folder of gpuscout's own, and the files in it


def own_folder(path: Path, store: Path | None, what: str, *, named: bool = False, make: bool = True) -> Path:
    """The folder `path` for gpuscout's own files (made, with its parents, where it is missing and
    `make`), or UsageError: something that is not a folder in its place, or, unless the user
    `named` it, a symbolic link (a folder gpuscout makes is never a way out of where it is)."""
    protected = Protected(store)
    st = _lstat(path, what)
    if st is not None and stat.S_ISLNK(st.st_mode):
        if not named:
            raise UsageError(f"{what} {path} is a symbolic link: gpuscout writes its files only into a folder of "
                             "its own; remove the link")
        try:
            st = os.stat(path)
        except OSError:
            raise UsageError(f"{what} {path} is a symbolic link to nothing: give a folder") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        why = protected.why(path, st)
        raise UsageError(f"{what} {path} is a {_kind(st.st_mode)}{f' that {why}' if why else ''}, not a folder: "
                         "move it away, or give another place")
    if st is None:
        above = next((a for a in path.parents if os.path.lexists(a)), None)
        if above is not None and not above.is_dir():
            raise UsageError(f"{what} {path}: {above} is a {_kind(os.stat(above).st_mode) if above.exists() else 'link to nothing'}"
                             ", not a folder: move it away, or give another place")
    if st is None and make:
        for parent in reversed([path, *path.parents]):
            try:
                os.mkdir(parent)
            except FileExistsError:
                if not parent.is_dir():
                    raise UsageError(f"{what} {path}: {parent} is a file, not a folder: move it away, or give "
                                     "another place") from None
            except OSError as exc:
                raise UsageError(f"{what} {path}: cannot make {parent} ({exc.strerror})") from None
    return path


def check_inside(folder: Path, name: str, store: Path | None, what: str, marks: tuple[str, ...], *,
                 force: bool = False) -> Path:
    """`folder/name`, a file gpuscout writes in a folder of its own, when it may be written: absent,
    or a regular file with no other name that gpuscout wrote (`marks`); else UsageError."""
    path = folder / name
    _name_fits(path, what)
    st = _lstat(path, what)
    if st is None:
        return path
    protected = Protected(store)
    why = protected.why(path, st) or protected.why(path, _stat(path))
    if why is not None:
        raise UsageError(f"{what} {path} {why}: gpuscout never writes over it")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {path} is a {_kind(st.st_mode)}, not a file gpuscout wrote: gpuscout writes only "
                         "regular files in its folders, never through a link; move it away")
    if st.st_nlink > 1:
        raise UsageError(f"{what} {path} is a hard link (one of {st.st_nlink} names of one file): gpuscout writes "
                         "only files of its own in its folders; move it away")
    if not force:
        _not_foreign(path, what, marks, None)
    return path


def _lstat(path: Path, what: str) -> os.stat_result | None:
    """What `path` itself is (a link as a link); None where nothing is (or a file stands where a
    folder above it should be: said by the caller that makes the folders)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot look at it ({exc.strerror})") from None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def replace_inside(folder: Path, name: str, data: str | bytes, store: Path | None, what: str,
                   marks: tuple[str, ...], *, force: bool = False) -> Path:
    """`data` as `folder/name`, whole, once check_inside allows it."""
    path = check_inside(folder, name, store, what, marks, force=force)
    replace_whole(path, data)
    return path


def create_inside(folder: Path, name: str, what: str) -> int:
    """A new file `folder/name` for gpuscout to write (a log), opened for writing; never one that
    exists, never through a link. UsageError where something is in its place."""
    path = folder / name
    _name_fits(path, what)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise UsageError(f"{what} {path} exists already: gpuscout writes a new file there; move it away") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot make it ({exc.strerror})") from None


def append_inside(path: Path, data: str | bytes) -> None:
    """`data` at the end of `path`, a file of gpuscout's own (made here when missing): never
    through a link, never into what is not a regular file of one name. OSError otherwise."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise OSError(errno.EPERM, f"{path} is not a file of gpuscout's own")
        _write_all(fd, data)
    finally:
        os.close(fd)


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


# What gpuscout's TensorBoard writer makes in a folder it replaces whole: a folder per trial
# (child/tensorboard_writer.py); a folder of these alone is gpuscout's even before FOLDER_MARK was kept.
_TRIAL_RUN = re.compile(r"trial-\d{4}")


def check_marked_folder(path: Path, what: str) -> Path:
    """A folder gpuscout removes and writes anew (a sweep's TensorBoard logs): absent, or a real
    folder of gpuscout's (it holds FOLDER_MARK, or only what the writer makes), so that replacing
    it never removes a folder, a link or a file of the user's; else UsageError."""
    st = _lstat(path, what)
    if st is None:
        return path
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {path} is a {_kind(st.st_mode)}, not a folder gpuscout wrote: gpuscout replaces "
                         "only its own; move it away")
    names = os.listdir(path)
    ours = FOLDER_MARK in names and stat.S_ISREG(os.lstat(path / FOLDER_MARK).st_mode)
    if not ours and not all(_TRIAL_RUN.fullmatch(n) and stat.S_ISDIR(os.lstat(path / n).st_mode) for n in names):
        raise UsageError(f"{what} {path} is a folder gpuscout did not write (it holds {sorted(names)[:3]}): gpuscout "
                         "replaces only its own; move it away")
    return path
