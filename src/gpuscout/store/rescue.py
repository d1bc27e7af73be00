"""Records a store could not take, never lost: saved whole as a `results import` document beside
the store (or, where that disk is full or read-only, in the working folder, then the temporary
one, then on stderr), kept until a later write stores them, and named when the command ends.

The store only stores (pytest-benchmark's storage is the model): what to do with what it could
not store is this module's, for Store.keep and for the in-process watch whose store cannot be
opened at all.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from gpuscout.core.outputs import RESCUE_KEY, replace_whole
from gpuscout.record import StoredRecord
from gpuscout.record.document import json_document


class Rescue:
    """The records `store_path` could not take, and where they are saved."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self.records: list[StoredRecord] = []
        self.path: Path | None = None  # where they are saved, once some are
        self.reason: str | None = None  # why the store could not take them, in one line

    def add(self, records: list[StoredRecord], reason: str) -> None:
        """Save `records`, with those saved before, in the one document."""
        self.records += records
        self.reason = reason
        self._save()

    def stored(self) -> None:
        """The store took them all after all: the document goes."""
        if self.path is not None and self.path.name != "<stderr>":
            self.path.unlink(missing_ok=True)
        self.records, self.path, self.reason = [], None, None

    def message(self) -> str | None:
        """What the command says at its end while records are saved here; None when none are."""
        if not self.records:
            return None
        return (
            f"{len(self.records)} record(s) could not be stored: {self.reason}; they are saved in "
            f"{self.path}: `gpuscout results import {self.path} --store {self.store_path}` stores them "
            "once the store works again"
        )

    def _save(self) -> None:
        """Written whole (a temporary name, then renamed), so a document is never half a one."""
        if self.path is not None and self.path.name != "<stderr>":
            places = [self.path]
        else:
            name = f"{self.store_path.name}.unsaved-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.json"
            places = [self.store_path.parent / name, Path.cwd() / name, Path(tempfile.gettempdir()) / name]
        # the document names its store: core/outputs/ knows it for a rescue file wherever it lies
        text = json_document(self.records, **{RESCUE_KEY: str(self.store_path), "reason": self.reason})
        for place in places:
            try:
                replace_whole(place, text)  # a temporary file made exclusively, then renamed: never through a link
                self.path = place
                return
            except OSError:
                continue
        # Nowhere to write: the records go to stderr, the one place left that keeps them
        sys.stderr.write(text + "\n")
        self.path = Path("<stderr>")
