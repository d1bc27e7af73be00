"""Folders gpuscout makes for its own files (a sweep's, a report's plots, tune's reports, watch's
traces) and the files in them: nothing followed, nothing of the user's replaced, logs made new."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.core.outputs.marks import FOLDER_MARK, refuse_foreign
from gpuscout.core.outputs.protected import Protected
from gpuscout.core.outputs.whole import kind, name_fits, replace_whole, write_all


def own_folder(path: Path, store: Path | None, what: str, *, named: bool = False, make: bool = True) -> Path:
    """The folder `path` for gpuscout's own files (made, with its parents, where it is missing and
    `make`), or UsageError: something that is not a folder in its place, or, unless the user
    `named` it, a symbolic link (a folder gpuscout makes is never a way out of where it is)."""
    protected = Protected(store)
    st = _lstat(path, what)
    if st is not None and stat.S_ISLNK(st.st_mode):
        if not named:
            raise UsageError(
                f"{what} {path} is a symbolic link: gpuscout writes its files only into a folder of "
                "its own; remove the link"
            )
        try:
            st = os.stat(path)
        except OSError:
            raise UsageError(f"{what} {path} is a symbolic link to nothing: give a folder") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        why = protected.why(path, st)
        raise UsageError(
            f"{what} {path} is a {kind(st.st_mode)}{f' that {why}' if why else ''}, not a folder: "
            "move it away, or give another place"
        )
    if st is None:
        above = next((a for a in path.parents if os.path.lexists(a)), None)
        if above is not None and not above.is_dir():
            what_it_is = kind(os.stat(above).st_mode) if above.exists() else "link to nothing"
            raise UsageError(
                f"{what} {path}: {above} is a {what_it_is}, not a folder: move it away, or give another place"
            )
        if make:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"{what} {path}: cannot make it ({exc.strerror})") from None
    return path


def check_inside(
    folder: Path, name: str, store: Path | None, what: str, marks: tuple[str, ...], *, force: bool = False
) -> Path:
    """`folder/name`, a file gpuscout writes in a folder of its own, when it may be written: absent,
    or a regular file with no other name that gpuscout wrote (`marks`); else UsageError."""
    path = folder / name
    name_fits(path, what)
    st = _lstat(path, what)
    if st is None:
        return path
    protected = Protected(store)
    why = protected.why(path, st) or protected.why(path, _stat(path))
    if why is not None:
        raise UsageError(f"{what} {path} {why}: gpuscout never writes over it")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"{what} {path} is a {kind(st.st_mode)}, not a file gpuscout wrote: gpuscout writes only "
            "regular files in its folders, never through a link; move it away"
        )
    if st.st_nlink > 1:
        raise UsageError(
            f"{what} {path} is a hard link (one of {st.st_nlink} names of one file): gpuscout writes "
            "only files of its own in its folders; move it away"
        )
    if not force:
        refuse_foreign(path, what, marks, None)
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


def replace_inside(
    folder: Path,
    name: str,
    data: str | bytes,
    store: Path | None,
    what: str,
    marks: tuple[str, ...],
    *,
    force: bool = False,
) -> Path:
    """`data` as `folder/name`, whole, once check_inside allows it."""
    path = check_inside(folder, name, store, what, marks, force=force)
    replace_whole(path, data)
    return path


def create_inside(folder: Path, name: str, what: str) -> int:
    """A new file `folder/name` for gpuscout to write (a log), opened for writing; never one that
    exists, never through a link. UsageError where something is in its place."""
    path = folder / name
    name_fits(path, what)
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
        write_all(fd, data)
    finally:
        os.close(fd)


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
        raise UsageError(
            f"{what} {path} is a {kind(st.st_mode)}, not a folder gpuscout wrote: gpuscout replaces "
            "only its own; move it away"
        )
    names = os.listdir(path)
    ours = FOLDER_MARK in names and stat.S_ISREG(os.lstat(path / FOLDER_MARK).st_mode)
    if not ours and not all(_TRIAL_RUN.fullmatch(n) and stat.S_ISDIR(os.lstat(path / n).st_mode) for n in names):
        raise UsageError(
            f"{what} {path} is a folder gpuscout did not write (it holds {sorted(names)[:3]}): gpuscout "
            "replaces only its own; move it away"
        )
    return path
