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

from gpuscout.core.outputs.marks import (
    CSV_MARK,
    FOLDER_MARK,
    HTML_MARK,
    MARKDOWN_MARK,
    PATCH_MARK,
    RESCUE_KEY,
    SQLITE_HEADER,
    written_by_gpuscout,
)
from gpuscout.core.outputs.named import Output, always_full, check_output, refused_streams, write
from gpuscout.core.outputs.own import (
    append_inside,
    check_inside,
    check_marked_folder,
    create_inside,
    own_folder,
    replace_inside,
)
from gpuscout.core.outputs.protected import Protected
from gpuscout.core.outputs.whole import replace_whole

__all__ = [
    "CSV_MARK",
    "FOLDER_MARK",
    "HTML_MARK",
    "MARKDOWN_MARK",
    "PATCH_MARK",
    "RESCUE_KEY",
    "SQLITE_HEADER",
    "Output",
    "Protected",
    "always_full",
    "append_inside",
    "check_inside",
    "check_marked_folder",
    "check_output",
    "create_inside",
    "own_folder",
    "refused_streams",
    "replace_inside",
    "replace_whole",
    "write",
    "written_by_gpuscout",
]
