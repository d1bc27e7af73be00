"""What a `gpuscout tune -- COMMAND` run applies inside the script (core/tune_settings.py's
TuneSettings, from GPUSCOUT_TUNE), and the one way an applier tells the parent what it did: a
`watch_applied` event, once per change, so the record says what really ran. Read by every
applier (child/applies/) and by child/tf_data.py; a test may set SETTINGS to another."""

from __future__ import annotations

import os

from gpuscout.child.watch_state import emit
from gpuscout.core import events
from gpuscout.core.tune_settings import TuneSettings

SETTINGS = TuneSettings.from_env(os.environ)
_said: set[str] = set()


def read_environment() -> None:
    """This run's settings from its environment as it is now (a warm interpreter's fork, once it
    holds the run's environment: one interpreter serves every setting of a tune session that
    Keras' import does not read, core/tune_settings.AT_KERAS_IMPORT)."""
    global SETTINGS
    SETTINGS = TuneSettings.from_env(os.environ)
    _said.clear()


events.on_environment(read_environment)


def settings() -> TuneSettings:
    """This run's settings, read at each call (a test sets SETTINGS)."""
    return SETTINGS


def applied(name: str, detail: str) -> None:
    """Tell the parent once per change what was applied, where."""
    if name not in _said:
        _said.add(name)
        emit("watch_applied", change=name, detail=detail)
