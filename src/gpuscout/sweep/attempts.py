"""One attempt of a command trial, kept apart on disk, and judged from what it left there.

Each attempt N of a trial writes its own files in the trial's log folder: stdout-N.log,
stderr-N.log, reports-N.jsonl (gpuscout.sweep.report), events-N.jsonl (the instrumentation's:
fit's epoch logs, step timing), done-N.json the moment the script's code has all run (written by
the trial's own Python process, child/watch_state.mark_done) and, the moment the command ends,
exit-N.json (written by the guard, executor/guard.py). So a trial run again never mixes its
attempts' reports, and a sweep resumed after its driver died learns from exit-N.json, or from
done-N.json when the driver died while the trial's interpreter was shutting down, that an attempt
finished, and takes its result from these files instead of running it again. Both are reserved
(executor/guard.reserve) before the trial runs and written in place, so a trial that fills the disk
still leaves them (issue 87, item 8).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.analysis import watch as watch_analysis
from gpuscout.core import outputs, watch_events
from gpuscout.core.failures import classify_failure
from gpuscout.core.units import reading
from gpuscout.core.watch_events import EpochEnded, WatchEvent
from gpuscout.executor import guard
from gpuscout.executor.local import STDERR_TAIL_CHARS
from gpuscout.record.run import RunRecord
from gpuscout.record.trial import TrialSteps, TrialTelemetry
from gpuscout.sweep.spec import SweepFile, number, score


@dataclass
class Attempt:
    # ok | failed | oom | timeout (the trial's own end: run again only with --retry-failed) |
    # pruned | interrupted (its driver stopped it, or `ours`: run again by --resume)
    status: str
    message: str | None = None
    metrics: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    telemetry: TrialTelemetry | None = None
    record: RunRecord | None = None  # workload sweeps
    steps: TrialSteps | None = None  # command trials: the main fit's step timing (analysis/watch.summary)
    explanations: list[dict] = field(default_factory=list)  # known failures in its output (gpuscout.explain)
    # not the trial's failure but gpuscout's (its files could not be written: a full disk, a folder
    # taken away): `interrupted`, run again by --resume, and the sweep stops (every trial would)
    ours: bool = False
    warm: bool = False  # forked from the sweep's warm interpreter (executor/warm.py), not a new one


# A disk that is full (ENOSPC, EDQUOT), in a trial's own last words: not the trial's failure
FULL_DISK = ("No space left on device", "Disk quota exceeded")


# Less room than this where a trial's logs go is a full disk: its own words (its stderr) may not
# have been written at all.
FULL_BELOW_BYTES = 2**20


def disk_full(folder: Path) -> str | None:
    """ "N KiB left" when the file system of `folder` has almost no room left, else None."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    left = st.f_bavail * st.f_frsize
    return f"{left // 1024} KiB left on the disk of its logs" if left < FULL_BELOW_BYTES else None


def ours(why: str) -> Attempt:
    """An attempt that did not end by the trial's doing: gpuscout could not keep its files."""
    return Attempt(
        "interrupted", f"not the trial's failure: {why}; `--resume` runs it again once that is mended", ours=True
    )


@dataclass(frozen=True)
class AttemptFiles:
    folder: Path
    number: int

    def _path(self, stem: str, suffix: str) -> Path:
        return self.folder / f"{stem}-{self.number}.{suffix}"

    @property
    def stdout(self) -> Path:
        return self._path("stdout", "log")

    @property
    def stderr(self) -> Path:
        return self._path("stderr", "log")

    @property
    def reports(self) -> Path:
        return self._path("reports", "jsonl")

    @property
    def events(self) -> Path:
        return self._path("events", "jsonl")

    @property
    def exit(self) -> Path:
        return self._path("exit", "json")

    @property
    def done(self) -> Path:
        """Written by the trial's own process once all its code has run (child/watch_state.mark_done)."""
        return self._path("done", "json")

    def code_done(self) -> int | None:
        """The exit status the trial's code ended with, as its done file says (1: an uncaught
        exception, else 0); None when it has not written one (it did not get that far)."""
        said = self._done()
        return None if said is None else (1 if said.get("uncaught") else 0)

    def done_note(self) -> str:
        """What the driver, stopped after the trial's code had all run, says of how it ended."""
        said = self._done() or {}
        return CODE_DONE_NOTE if said.get("phase") != "body" else STOPPED_IN_EXIT_NOTE

    def _done(self) -> dict | None:
        return _written(self.done)

    def reserve(self) -> None:
        """The room of the attempt's exit and done files, kept before the trial runs: a trial that
        fills the disk still leaves the files that say it finished (executor/guard.reserve)."""
        for path in (self.exit, self.done):
            guard.reserve(str(path))

    @classmethod
    def next_in(cls, folder: Path) -> AttemptFiles:
        """The first attempt number no earlier attempt (of this run or one before it) used."""
        return cls(folder, max(numbers(folder), default=0) + 1)

    def open_log(self, stem: str):
        """The attempt's new stdout or stderr log, opened for the trial's process to write: a file
        made here, never one that was there or a link (core/outputs/)."""
        return os.fdopen(outputs.create_inside(self.folder, f"{stem}-{self.number}.log", "a trial's log"), "w")

    def record_event(self, event: dict) -> None:
        outputs.append_inside(self.events, json.dumps(event) + "\n")

    def read_events(self) -> list[WatchEvent]:
        """The trial's events as it kept them (a line cut short by a kill is not one)."""
        if not self.events.exists():
            return []
        lines = self.events.read_text(encoding="utf-8", errors="replace").splitlines()
        return [e for e in map(watch_events.decode, lines) if e is not None]


def _written(path: Path) -> dict | None:
    """What a status file says; None while it holds only its reserved room (or is not there)."""
    try:
        said = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(said, dict):
        return {}
    return None if said.get("reserved") else said


def numbers(folder: Path) -> list[int]:
    return [int(m.group(1)) for p in folder.glob("stdout-*.log") if (m := re.fullmatch(r"stdout-(\d+)\.log", p.name))]


def read_metrics(stdout_text: str, reports: Path, events: Sequence[WatchEvent] = ()) -> tuple[dict, list[dict]]:
    """(last value of each metric, the reports in order) from a command trial. What the script
    reports itself (JSON lines on stdout, gpuscout.sweep.report's file) is its history; a script
    that reports nothing has Keras fit's epoch logs (the instrumentation's events) as its
    history. The metrics are fit's last logs, overridden by what the script reported."""
    reported: list[dict] = []
    for line in stdout_text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                reported.append({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    if reports.exists():
        for line in reports.read_text(encoding="utf-8").splitlines():
            try:
                reported.append(json.loads(line))
            except ValueError:
                continue
    from_fit = [{"epoch": e.epoch, **e.logs} for e in events if isinstance(e, EpochEnded)]
    metrics: dict = {}
    for entry in from_fit + reported:
        metrics.update({k: v for k, v in entry.items() if k not in ("time", "step", "epoch")})
    return metrics, reported or from_fit


def explained(tail: str) -> list[dict]:
    """The known failures in a trial's stderr (gpuscout.explain), with what this process knows of
    the machine: the trial's environment variables (a driver's host has no doctor report)."""
    import os

    from gpuscout.explain import Machine, explain

    return [e.model_dump() for e in explain(tail, Machine(env=dict(os.environ)))]


def judge(
    sweep: SweepFile,
    files: AttemptFiles,
    returncode: int | None,
    *,
    timed_out: bool = False,
    cancelled: bool = False,
    telemetry: TrialTelemetry | None = None,
) -> Attempt:
    """How an attempt ended, from the files it left and its exit status."""
    tail = files.stderr.read_text(errors="replace")[-STDERR_TAIL_CHARS:] if files.stderr.exists() else ""
    stdout = files.stdout.read_text(errors="replace") if files.stdout.exists() else ""
    events = files.read_events()
    metrics, history = read_metrics(stdout, files.reports, events)
    common = {"metrics": metrics, "history": history, "telemetry": telemetry, "steps": watch_analysis.summary(events)}
    if cancelled:
        return Attempt("interrupted", "stopped by the driver", **common)
    if timed_out:
        return Attempt("timeout", f"exceeded the {sweep.timeout_s:g} s trial timeout and was killed", **common)
    full = next((f for f in FULL_DISK if f in tail), None) or (disk_full(files.folder) if returncode != 0 else None)
    if returncode != 0 and full:
        attempt = ours(f"it stopped on a full disk ({full}); its logs are in {files.folder}")
        attempt.metrics, attempt.history, attempt.telemetry, attempt.steps = (
            common["metrics"],
            common["history"],
            telemetry,
            common["steps"],
        )
        return attempt
    if returncode != 0:
        last_line = (tail.strip().splitlines() or ["(no stderr)"])[-1][:300]
        return Attempt(
            classify_failure(tail),
            f"exited with code {returncode}: {last_line}",
            **common,
            explanations=explained(tail),
        )
    if sweep.metric.name not in metrics:
        seen = ", ".join(sorted(metrics)) or "nothing"
        return Attempt(
            "failed",
            f"finished without reporting {sweep.metric.name!r} (it reported {seen}; "
            "fit's logs, JSON lines on stdout and gpuscout.sweep.report count)",
            **common,
        )
    value = metrics[sweep.metric.name]
    if number(value) is None:
        return Attempt(
            "failed",
            f"reported {sweep.metric.name} as {str(value)[:60]!r}, not a number: nothing to rank it by",
            **common,
        )
    if score(value) is None:  # ran to its end: kept as it ended, never ranked
        return Attempt(
            "ok",
            f"its {sweep.metric.name} ended {reading(value)}: the training diverged, and it is not ranked",
            **common,
        )
    return Attempt("ok", None, **common)


def finished_attempt(sweep: SweepFile, folder: Path) -> tuple[AttemptFiles, Attempt, float] | None:
    """The trial's last attempt, judged, when it ended by itself (its exit-N.json exists): what a
    driver that died before storing it would have stored. None when it did not end (it was
    killed with its driver) or never started. Also how long it ran, as its guard timed it."""
    last = max(numbers(folder), default=None) if folder.exists() else None
    if last is None:
        return None
    files = AttemptFiles(folder, last)
    status = _written(files.exit) or {}
    returncode = status.get("returncode")
    if isinstance(returncode, int):
        attempt = judge(sweep, files, returncode)
        attempt.warm = status.get("warm") is True  # its guard's word (a status file of an older gpuscout has none)
        return files, attempt, number(status.get("duration_s")) or 0.0
    # its guard did not write it (ended with the driver): the trial's own done file may say more
    returncode = files.code_done()
    if returncode is None:
        return None
    attempt = judge(sweep, files, returncode)
    attempt.message = attempt.message or files.done_note()
    return files, attempt, _duration_from_files(files)


# Said of a trial whose driver stopped while the trial's own exit handlers (atexit) ran: all of its
# code had run and its result was reported, so it is finished (never run again by --resume)
STOPPED_IN_EXIT_NOTE = (
    "finished: all of its code had run when its driver stopped, during its exit (its atexit "
    "handlers, then the interpreter's shutdown), which may not have ended; its exit status is "
    "the script's (0, or 1 after an uncaught exception)"
)
# Said of a trial taken from its done file: the exit status it would have given is not known
CODE_DONE_NOTE = (
    "all of its code had run when its driver stopped; its process was ended during the interpreter's "
    "shutdown, so its exit status is the script's (0, or 1 after an uncaught exception)"
)


def _duration_from_files(files: AttemptFiles) -> float:
    """How long an attempt ran, from its files' times (its stdout opened, its done file written)."""
    try:
        return max(0.0, files.done.stat().st_mtime - files.stdout.stat().st_ctime)
    except OSError:
        return 0.0
