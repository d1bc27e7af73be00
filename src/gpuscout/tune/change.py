"""What tune tries and why: a change (one variant of a knob, with what the child applies and the
line the user would write), a knob it skips with its reason, and a round's plan of both, and the
one reason the input planners share (the loop does not wait for its input). Imported by every
part of tune (the kinds of change in tune/changes/, the planner, the search, the patch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscout.analysis.verdict import INPUT_BOUND_SHARE
from gpuscout.core.tune_settings import TuneSettings
from gpuscout.record.watch import WatchRecord


@dataclass
class Change:
    name: str  # a variant's name: jit_compile, steps_per_execution_32, workers_4_processes, ...
    knob: str  # which kind it is (tune/changes: CHANGES)
    # what the instrumentation applies: core/tune_settings.TuneSettings' fields by name, checked
    # against it where they cross into the script
    settings: dict[str, Any]
    line: str  # the line to write in the script
    why: str  # what in the baseline made it worth trying

    @property
    def tuned(self) -> TuneSettings:
        """Its settings typed: read by attribute, never by a key that is some change's name."""
        return TuneSettings.from_dict(self.settings)


@dataclass
class Skip:
    knob: str
    reason: str


@dataclass
class Deferred:
    """Changes whose worth another cause seen in the run is predicted to cap (faster arithmetic
    while the loop waits for its input): measured only together with a change that lifts that cause
    (tune/search.py), never alone."""

    changes: list[Change]
    reason: str


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    deferred: list[Change] = field(default_factory=list)  # each also named in `skipped`, with its reason


def not_waiting(r: WatchRecord) -> str | None:
    """Why a change to the input is not worth a run (the loop waits for it under INPUT_BOUND_SHARE
    of the time, or its wait is not seen), or None where it waits."""
    share = r.input_wait_share
    if share is None:
        return "the input wait was not seen (read inside a compiled loop)"
    if share < INPUT_BOUND_SHARE:
        return f"the loop waited for input {share:.1%} of the time (under {INPUT_BOUND_SHARE:.0%})"
    return None
