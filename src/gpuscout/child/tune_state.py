"""What a `gpuscout tune -- COMMAND` run applies inside the script (core/tune_settings.py's
TuneSettings, from GPUSCOUT_TUNE), and the one way an applier tells the parent what it did: a
`watch_applied` event, once per change, so the record says what really ran. Read by every
applier (child/applies/) and by child/tf_data.py; a test may set SETTINGS to another."""

from __future__ import annotations

import os

from gpuscout.child.watch_state import emit
from gpuscout.core.tune_settings import TuneSettings

SETTINGS = TuneSettings.from_env(os.environ)
_said: set[str] = set()


def settings() -> TuneSettings:
    """This run's settings, read at each call (a test sets SETTINGS)."""
    return SETTINGS


def applied(name: str, detail: str) -> None:
    """Tell the parent once per change what was applied, where."""
    if name not in _said:
        _said.add(name)
        emit("watch_applied", change=name, detail=detail)
