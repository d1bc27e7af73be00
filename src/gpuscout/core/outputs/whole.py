"""Writing a file whole or not at all: a temporary file made exclusively beside it (a name that
fits the file system's limit however long the final one), then renamed over it; and the names
and kinds of what a path holds, as a refusal says them."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from gpuscout.core.errors import UsageError


def kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "file"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return name
    return "special file"


def name_fits(path: Path, option: str) -> None:
    """A name the file system can hold (NAME_MAX bytes, 255 on Linux's file systems)."""
    limit = name_max(path.parent)
    if len(os.fsencode(path.name)) > limit:
        raise UsageError(
            f"{option} {str(path)[:80]}…: the name is {len(os.fsencode(path.name))} bytes, longer than "
            f"the {limit} this file system allows; give a shorter one"
        )


def name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder if folder.exists() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
    fd, temporary = temporary_beside(path)
    try:
        try:
            write_all(fd, data)
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


def temporary_beside(path: Path) -> tuple[int, Path]:
    """A new file beside `path` for its content: `.NAME.RANDOM.partial`, NAME cut so that the whole
    fits the file system's limit on a name."""
    room = name_max(path.parent) - len(".") - len(".12345678.partial")
    stem = os.fsencode(path.name)[:room].decode("utf-8", errors="ignore")
    for _ in range(100):
        temporary = path.with_name(f".{stem}.{secrets.token_hex(4)}.partial")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), temporary
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free temporary name beside {path}")
