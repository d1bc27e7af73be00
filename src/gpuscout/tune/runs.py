"""Running a `gpuscout tune -- COMMAND` session: the baseline, each change, the changes that won
together, and the baseline again, each a watched run of the unchanged script (watch/session.py),
stored as it ends; tune/script.py decides which changes and reads what they bought.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpuscout.core import engine
from gpuscout.core.errors import RunError
from gpuscout.core.provenance import utc_now
from gpuscout.executor import scratch
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store
from gpuscout.tune import script
from gpuscout.watch.command import Command
from gpuscout.watch.session import WatchOptions, watch_command
from gpuscout.watch.view import View


@dataclass
class ScriptOptions:
    steps: int | None = None  # every run's training steps; None: what TARGET_TRAINING_S of the baseline ran
    budget_s: float = 30 * 60
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


@dataclass
class Progress:
    """What a display is told: each run as it starts and ends."""

    started: Callable[[str, int, int], None] = lambda name, number, total: None
    ended: Callable[[str, WatchRecord], None] = lambda name, record: None


@dataclass
class Session:
    command: Command
    options: ScriptOptions
    context: engine.Session
    store: Store
    view: Callable[[], View]
    progress: Progress = field(default_factory=Progress)
    # one persistent XLA compilation cache for the session's runs (jax): what a change does not
    # touch (the weights' initializers, the baseline's step when it runs again) is compiled once
    cache: Path | None = None

    def run(self, name: str, steps: int | None, change: script.Change | None, number: int, total: int) -> WatchRecord:
        self.progress.started(name, number, total)
        options = WatchOptions(steps=steps, duration_s=None if steps else script.TARGET_TRAINING_S,
                               window_s=script.WINDOW_S,
                               window_steps=max(1, steps // script.WINDOWS_PER_RUN) if steps else None,
                               change=change.name if change else None,
                               change_settings=change.settings if change else None,
                               compilation_cache=self.cache,
                               hash_batches=script.HASH_BATCHES if name == "baseline" else 0)
        record = watch_command(self.command, options, self.context, self.store, self.view())
        self.progress.ended(name, record)
        return record


def tune_script(session: Session) -> dict:
    """The whole session; the report (rows ranked by speed-up, skipped changes, the summary)."""
    session.cache = scratch.make("tunecache")  # swept up if gpuscout dies
    try:
        return _session(session)
    finally:
        shutil.rmtree(session.cache, ignore_errors=True)


def _session(session: Session) -> dict:
    started = time.monotonic()
    options = session.options
    baseline = session.run("baseline", options.steps, None, 1, 0)  # how many follow, it decides
    if baseline.status == "interrupted":
        raise KeyboardInterrupt
    main = baseline.main
    if main is None or main.custom or not baseline.windows:
        # The script ran: what it did is stored (a crash and its explanation are a finding), so
        # this is a run that failed (exit 1), not bad input (exit 2, which changes nothing).
        failed = baseline.status == "failed"
        why = (f"failed before any step{f' ({baseline.error.message})' if baseline.error and baseline.error.message else ''}"
               if failed else "called no Model.fit")
        raise RunError(f"tune needs the steps of a Keras Model.fit: {session.command.workload} {why}; the baseline is "
                       f"stored as {baseline.id}: `gpuscout results show {baseline.id}` shows what happened")
    steps = options.steps or max(main.steps, script.MIN_STEPS)
    planned = script.plan(baseline, options.only, options.skip)
    per_run_s = max(baseline.duration_s, 1.0)
    rows, records, skipped = [], [baseline], list(planned.skipped)
    done: list[script.Change] = []
    total = len(planned.changes) + 2  # and the combined run, when two changes win
    for number, change in enumerate(planned.changes, 2):
        if time.monotonic() - started + 2 * per_run_s > options.budget_s:  # this run and the baseline again
            skipped.append(script.Skip(change.knob, f"{change.name}: the --budget was spent"))
            continue
        record = session.run(change.name, steps, change, number, total)
        if record.status == "interrupted":
            raise KeyboardInterrupt
        records.append(record)
        done.append(change)
        rows.append(script.row(change, record, baseline))
    together = script.combined(done, rows)
    if together is not None:
        if time.monotonic() - started + 2 * per_run_s <= options.budget_s:
            total += 1
            record = session.run("combined", steps, together, total - 1, total)
            records.append(record)
            rows.append(script.row(together, record, baseline))
        else:
            skipped.append(script.Skip("combined", "the --budget was spent"))
    again = session.run("baseline again", steps, None, total, total)
    records.append(again)
    rows.sort(key=lambda r: -(r.get("ratio") or 0))
    return {
        "session": session.context.group_id, "created_utc": utc_now(), "command": session.command.given,
        "workload": session.command.workload, "steps": steps,
        "baseline": script.row(None, baseline, baseline), "baseline_again": script.row(None, again, baseline),
        "noisy": script.noisy(baseline, again), "rows": rows,
        "skipped": [{"change": s.knob, "reason": s.reason} for s in skipped],
        "summary": script.summary(rows), "wall_s": time.monotonic() - started,
        "run_ids": [r.id for r in records],
    }
