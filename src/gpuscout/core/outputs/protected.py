"""What no output may ever be: the results store by identity, the files SQLite keeps beside it
and gpuscout's rescue files, existing or not (a name is judged by its folder's identity and its
own), and a rescue document wherever it was moved."""

from __future__ import annotations

import glob
import os
import re
import stat
from pathlib import Path

from gpuscout.core.outputs.marks import is_rescue_document

# The files SQLite keeps beside a database (sqlite.org/tempfiles.html).
STORE_SIDE_FILES = ("-wal", "-shm", "-journal")
# A rescue file's name beside its store (store/rescue.py)
RESCUE_SUFFIX = re.compile(r"\.unsaved-.*\.json(\.partial)?$")
STORE_ITSELF = "is the results store itself (or a file SQLite or gpuscout keeps beside it)"


class Protected:
    """The store and what lives beside it: what no output may ever be. A store named through a
    symlink is judged as both names: SQLite keeps its side files beside the file the link reaches
    (issue 79, item 5: `-o s.sqlite-wal` beside the real store was written)."""

    def __init__(self, store: Path | None) -> None:
        self.store = Path(store) if store is not None else None
        self.identities: set[tuple[int, int]] = set()
        self.folders: dict[tuple[int, int], set[str]] = {}  # a store's folder -> the store names in it
        if self.store is None:
            return
        for base in dict.fromkeys([self.store, Path(os.path.realpath(self.store))]):
            for path in self._side_paths(base):
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                self.identities.add((st.st_dev, st.st_ino))
            try:
                st = os.stat(base.parent)
            except OSError:
                continue
            self.folders.setdefault((st.st_dev, st.st_ino), set()).add(base.name)

    @staticmethod
    def _side_paths(base: Path) -> list[Path]:
        try:  # (a path past the file system's limits has none: os.path.isdir says False)
            rescues = (
                sorted(base.parent.glob(glob.escape(base.name) + ".unsaved-*.json"))
                if os.path.isdir(base.parent)
                else []
            )
        except OSError:
            rescues = []
        return [base, *(base.with_name(base.name + s) for s in STORE_SIDE_FILES), *rescues]

    def why(self, path: Path, st: os.stat_result | None) -> str | None:
        """Why `path` (`st`: what it is, through links) must never be written, or None."""
        if st is not None and (st.st_dev, st.st_ino) in self.identities:
            return f"{STORE_ITSELF}, whatever path reaches it"
        if self.folders:
            try:
                parent = os.stat(path.parent)
            except OSError:
                parent = None
            for store in self.folders.get((parent.st_dev, parent.st_ino), ()) if parent is not None else ():
                name = path.name
                if name in {store + s for s in STORE_SIDE_FILES}:
                    return f"{STORE_ITSELF}: the name of one SQLite keeps beside it, which it would take for its own"
                if name.startswith(store) and RESCUE_SUFFIX.search(name[len(store) :]):
                    return f"{STORE_ITSELF}: the name of its rescue file, the only copy of what it could not store"
        if st is not None and stat.S_ISREG(st.st_mode) and is_rescue_document(path):
            return (
                "is a rescue file (records a store could not take, the only copy): `gpuscout results import` "
                "it, then remove it"
            )
        return None
