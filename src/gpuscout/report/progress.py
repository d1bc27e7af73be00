"""The live view of runs being measured: one bar per run that shows what its child is doing
(compiling, warming up, each window or epoch). Every verb that measures shows this one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpuscout.core.spec import RunSpec
from gpuscout.measure import engine
from gpuscout.record.run import RunRecord
from gpuscout.report import terminal


class RunBars(engine.Progress):
    def __init__(self, progress: Progress, console: Console) -> None:
        self.progress, self.console, self.task, self.label = progress, console, None, ""

    def run_started(self, spec: RunSpec, label: str, number: int, total: int) -> None:
        self.label = escape(f"[{number}/{total}] {label}" if total else f"[{number}] {label}")
        if spec.inference:
            ticks = len(spec.inference.batch_sizes)
        else:
            ticks = spec.to_accuracy.max_epochs if spec.to_accuracy else spec.windows
        self.task = self.progress.add_task(f"{self.label}: starting", total=ticks)

    def _say(self, text: str, advance: int = 0) -> None:
        self.progress.update(self.task, advance=advance, description=f"{self.label}: {text}")

    def event(self, spec: RunSpec, event: dict) -> None:
        kind = event.get("event")
        if kind == "compiled":
            self._say(f"compiled in {event['compile_s']:.1f} s, warming up")
        elif kind == "prepared":
            self._say(f"ready in {event['prepare_s']:.1f} s")
        elif kind == "warmed_up":
            self._say(f"measuring ({event['steps_per_window']} steps/window)")
        elif kind == "epoch":
            self._say(
                f"epoch {event['epoch']}/{event['of']} val accuracy {event['val_accuracy']:.4f} "
                f"(target {event['target']:g}), {event['elapsed_s']:.0f} s",
                advance=1,
            )
        elif kind == "window":
            what = "batch size" if spec.inference else "window"
            self._say(f"{what} {event['index'] + 1}/{event['of']} {event['throughput']:,.1f}/s", advance=1)

    def run_finished(self, label: str, records: list[RunRecord]) -> None:
        status = records[0].status if records else "done"
        self.progress.update(self.task, description=f"{self.label}: {status}", completed=self.progress.tasks[-1].total)

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]note:[/] {escape(text)}", soft_wrap=True)  # one line in a log, however long


@contextlib.contextmanager
def run_bars(quiet: bool = False) -> Iterator[RunBars]:
    """Bars on stderr, cleared at the end when `quiet` (--json: only the JSON on stdout stays)."""
    err = terminal.console(stderr=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err, transient=quiet
    ) as progress:
        yield RunBars(progress, err)
