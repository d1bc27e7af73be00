"""`gpuscout watch` on the terminal while the command runs: the live view on a terminal, one line
and the command's own output elsewhere (report/watch.py prints the verdict after it).

The command's own output is the user's: in the live view each line it prints is shown above the
view as plain text (never read as markup); otherwise it passes through byte for byte.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from rich.console import Group
from rich.live import Live
from rich.text import Text

from gpuscout.core.watch_events import EpochEnded, FitAnnounced, FitEnded, LimitReached, WatchEvent, Window
from gpuscout.measure.view import View
from gpuscout.report import format as fmt
from gpuscout.report import terminal

if TYPE_CHECKING:
    from gpuscout.measure.command import Command
    from gpuscout.measure.gpus import GpuWatch


class Lines:
    """Bytes of one stream cut into lines; a line rewritten with carriage returns (a progress
    bar) keeps only its last version."""

    def __init__(self, show) -> None:
        self.show, self.pending = show, b""

    def __call__(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            self.show(_last_version(line))

    def flush(self) -> None:
        if self.pending.strip():
            self.show(_last_version(self.pending))
        self.pending = b""


def _last_version(line: bytes) -> str:
    parts = [p for p in line.rstrip(b"\r").split(b"\r")]
    return parts[-1].decode("utf-8", errors="replace") if parts else ""


class Plain(View):
    """Not a terminal, or --quiet: the command's output as it is, and one line from gpuscout at the
    start (unless quiet). With --json the command's stdout goes to stderr: stdout is the JSON."""

    def __init__(self, quiet: bool, as_json: bool) -> None:
        self.quiet, self.as_json = quiet, as_json
        self.err = terminal.console(stderr=True, highlight=False, soft_wrap=True)

    def started(self, command: Command, pid: int, gpus: GpuWatch | None) -> None:
        if not self.quiet:
            self.err.print(
                Text(f"gpuscout watch: {command.workload} (pid {pid}) watched; the verdict comes at its end")
            )

    def stdout(self):
        return self.stderr if self.as_json else None

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.print(Text(f"note: {text}"))


class LiveView(View):
    """On a terminal: the command's output above, gpuscout's view of it below."""

    def __init__(self) -> None:
        self.err = terminal.console(stderr=True, highlight=False)
        self.live: Live | None = None
        self.out, self.errors = Lines(self._show), Lines(self._show)
        self.command, self.pid, self.gpus = None, None, None
        self.started_at = time.monotonic()
        self.fit: FitAnnounced | None = None
        self.window: Window | None = None
        self.epoch: EpochEnded | None = None
        self.state = "starting"

    def started(self, command: Command, pid: int, gpus: GpuWatch | None) -> None:
        self.command, self.pid, self.gpus, self.started_at = command, pid, gpus, time.monotonic()
        self.live = Live(
            get_renderable=self._render,
            console=self.err,
            refresh_per_second=2,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def _show(self, line: str) -> None:
        (self.live.console if self.live else self.err).print(Text(line), soft_wrap=True)

    def stdout(self):
        return self.out

    def stderr(self, chunk: bytes) -> None:
        self.errors(chunk)

    def note(self, text: str) -> None:
        self._show(f"gpuscout: {text}")

    def event(self, event: WatchEvent) -> None:
        if isinstance(event, FitAnnounced):
            self.fit, self.state = event, "training"
        elif isinstance(event, Window):
            self.window = event
        elif isinstance(event, EpochEnded):
            self.epoch = event
        elif isinstance(event, LimitReached):
            self.state = f"limit reached ({event.reason}): stopping"
        elif isinstance(event, FitEnded):
            self.state = "fit ended"

    def stopped(self) -> None:
        self.out.flush()
        self.errors.flush()
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _render(self) -> Group:
        elapsed = f"{time.monotonic() - self.started_at:.0f} s"
        lines = [
            f"gpuscout watch: {self.command.workload if self.command else ''} (pid {self.pid}) {elapsed}, {self.state}"
        ]
        if self.window:
            w = self.window
            seconds = w.end_monotonic_s - w.start_monotonic_s
            rate = f", {fmt.number(w.samples / seconds, 0)} samples/s" if w.samples and seconds > 0 else ""
            wait = w.input_wait_s
            waiting = f", input wait {wait / seconds:.0%}" if wait is not None and seconds > 0 else ""
            done, planned = (self.epoch.epoch if self.epoch else 0), (self.fit.epochs if self.fit else None)
            where = f"epoch {min(done + 1, planned) if planned else done + 1}{f'/{planned}' if planned else ''}"
            lines.append(f"{where}: step {fmt.seconds(seconds / max(w.steps, 1))}{rate}{waiting}")
        for index, sample in (self.gpus.latest() if self.gpus else {}).items():
            util = "—" if sample.gpu_util_pct is None else f"{sample.gpu_util_pct:.0f}%"
            power = "" if sample.power_w is None else f", {sample.power_w:.0f} W"
            lines.append(f"GPU {index}: {util} busy, {fmt.bytes_(sample.memory_used_bytes)} used{power}")
        if self.epoch and self.epoch.logs:
            logs = "  ".join(f"{k} {fmt.reading(v)}" for k, v in list(self.epoch.logs.items())[:6])
            lines.append(f"epoch {self.epoch.epoch}: {logs}")
        return Group(*(Text(line, no_wrap=True, overflow="ellipsis", style="cyan") for line in lines))


def view_for(quiet: bool, as_json: bool) -> View:
    """The live view on a terminal; plain output otherwise (a log file, a pipe, --quiet, --json)."""
    if not (quiet or as_json) and sys.stdout.isatty() and sys.stderr.isatty():
        return LiveView()
    return Plain(quiet, as_json)
