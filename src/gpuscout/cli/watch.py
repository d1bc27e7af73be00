"""`gpuscout watch`: your own training command, unchanged, measured and diagnosed."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, StorePath, Tracking, grouped
from gpuscout.core import signals
from gpuscout.core.errors import UsageError
from gpuscout.measure import command as commands
from gpuscout.measure import engine, rules, watching
from gpuscout.report import terminal
from gpuscout.report.watch_live import view_for
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.tracking import sending as tracking
from gpuscout.watch import attach

HELP = """Run your training command unchanged and say why it is slow: every Keras Model.fit it calls
is timed step by step (time per step, time waiting for the next batch, time between steps)
without editing a file; NVML shows the GPUs it uses; the verdict ranks the causes by the time
each could save, with the change to make.

The command's output is shown as usual, Ctrl-C is passed on to it, and gpuscout exits with its
exit code (0 when --steps/--duration stopped it; 130 on Ctrl-C). Everything is stored:
`gpuscout results list`, `compare` (before and after a fix) and `report` show it.

Examples:

    gpuscout watch -- python train.py --lr 0.1

    # diagnose a long training in minutes
    gpuscout watch --steps 300 -- python train.py

    gpuscout watch --duration 10m --json -- python train.py > watch.json

    # also a profiler trace of steps 20-25
    gpuscout watch --trace-steps 20:25 -- python train.py

    # shell syntax
    gpuscout watch -- 'CUDA_VISIBLE_DEVICES=1 python train.py | tee train.log'

    # a training already running: NVML only
    gpuscout watch --pid 12345 --duration 60s

    # a notebook, run top to bottom in a real kernel (docs/notebooks.md)
    gpuscout watch --steps 300 train.ipynb

    # also logged to MLflow (--mlflow alone: MLFLOW_TRACKING_URI's server)
    gpuscout watch --mlflow http://mlflow:5000 --steps 300 -- python train.py

In JupyterLab: `%load_ext gpuscout`, then `%%gpuscout watch` on the cell that trains.

A loop of your own (no fit) is timed with one line per step: gpuscout.watch.step(samples=n).
"""


@grouped
def watch(
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- COMMAND [ARGS]...", help="The command to run and watch, after `--`."),
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option(
            help="Stop after this many training steps: the script halts there and nothing more of it runs (no "
            "validation, callback or code after fit); what was measured is kept."
        ),
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            help="Stop after this much training, e.g. 90s or 10m; with --pid: how long to watch [default 60s]."
        ),
    ] = None,
    pid: Annotated[
        int | None, typer.Option(help="Attach to this running process instead of running a command: NVML only.")
    ] = None,
    trace_steps: Annotated[
        str | None,
        typer.Option("--trace-steps", help="Take the framework's profiler trace of these training steps, e.g. 20:25."),
    ] = None,
    shell: Annotated[
        bool | None,
        typer.Option("--shell/--no-shell", help="Run COMMAND with /bin/sh [default: when it uses shell syntax]."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No live view: only the command's output and the verdict.")
    ] = False,
    label: Annotated[
        str | None,
        typer.Option(help="The name the run is listed and compared by [default: the script's name]."),
    ] = None,
    *,
    track: Tracking,
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    rules.at_least("--steps", steps, 1)
    target = track.target(store_path)  # bad input: before anything runs
    options = watching.WatchOptions(
        steps=steps,
        duration_s=rules.duration_s("--duration", duration),
        trace_steps=rules.step_range("--trace-steps", trace_steps),
        label=_label(label),
    )
    if pid is not None and (command or steps or trace_steps):
        raise UsageError("--pid watches a process already running: give no command, --steps or --trace-steps")
    resolved = commands.resolve(command or [], shell) if pid is None else None
    view = view_for(quiet, as_json)
    with Nvml() as nvml, Store(store_path) as store:
        context = engine.Session(nvml)
        if resolved is None:
            record = attach.watch_pid(pid, options, context, store, view)
        else:
            record = watching.watch_command(resolved, options, context, store, view)
        emit(record, as_json)
        if not as_json:
            terminal.console(stderr=True, highlight=False).print(f"stored as {record.id} in {store.path}", markup=False)
        if target:
            tracking.send(target, [record], store)
        else:
            tracking.hint(record, store)
    raise typer.Exit(exit_code(record))


def exit_code(record) -> int:
    """The command's own exit code; 0 when gpuscout stopped it at a limit, 130 on Ctrl-C, 143 on SIGTERM."""
    if record.status == "interrupted":
        return signals.exit_code()  # 130 for Ctrl-C, 143 for SIGTERM
    if record.status in ("ok", "stopped") or record.exit_code is None:
        return 0
    code = record.exit_code
    return 128 - code if code < 0 and -code in signal.valid_signals() else code


def _label(text: str | None) -> str | None:
    """--label: one printable line, as a workload's name is shown and compared."""
    if text is None:
        return None
    if not text.strip() or not text.isprintable() or len(text) > 200:
        raise UsageError(f"--label {text[:40]!r}: give a name of 1 to 200 printable characters, on one line")
    return text.strip()
