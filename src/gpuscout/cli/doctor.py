"""`gpuscout doctor`, and `doctor --explain` for a log."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import typer

from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson
from gpuscout.core.errors import UsageError
from gpuscout.doctor import DoctorResult, Explained, run_doctor
from gpuscout.explain import Context, Machine, explain
from gpuscout.report import terminal

HELP = """Check driver, GPUs, CUDA/cuDNN as each backend sees them, and XLA; say how to fix problems.
With --explain, read an error log instead: every known failure in it (the root cause first),
the line that shows it, and the fix for this machine (its driver, CUDA/cuDNN, GPUs and memory).

Exits 1 when a check fails, 0 otherwise (also on a machine with no GPU). With --explain: 0.

Examples:

    gpuscout doctor

    gpuscout doctor --json | jq '.checks[] | select(.status != "ok")'

    gpuscout doctor --explain train.log

    python train.py 2>&1 | gpuscout doctor --explain -

    gpuscout doctor --explain "Loaded runtime CuDNN library: 9.1.0 but source was compiled with: 9.3.0."

    # names the batch that fits
    gpuscout doctor --explain oom.log --workload resnet50 --batch-size 512
"""

# A log larger than this is read from its end, where its failure is: 8 MiB is about 100,000 lines
# of a training's output, explained in about a second (50 MiB of stdin once took 18 s).
MAX_INPUT_BYTES = 8 * 2**20
# Standard input that never ends (`yes | gpuscout doctor --explain -`) is read this far at most.
MAX_STREAM_BYTES = 256 * 2**20
CHUNK_BYTES = 2**20


def doctor(
    explain_input: str | None = typer.Option(
        None,
        "--explain",
        metavar="FILE|-|TEXT",
        help="Explain the failures in a log file, standard input (-) or the text given.",
    ),
    workload: str | None = typer.Option(None, help="With --explain: the workload the log came from (OOM advice)."),
    batch_size: int | None = typer.Option(None, "--batch-size", "-b", help="With --explain: its per-GPU batch."),
    precision: str | None = typer.Option(None, help="With --explain: its precision."),
    as_json: AsJson = False,
) -> None:
    if explain_input is None and (workload or batch_size or precision):
        raise UsageError("--workload, --batch-size and --precision describe the run of an --explain log: add --explain")
    text = None if explain_input is None else _read(explain_input)
    context = _context(workload, batch_size, precision)
    console = terminal.console(stderr=True)
    if text is None:
        with console.status("probing NVML and each installed backend (imports take a few seconds)"):
            result = DoctorResult(run_doctor())
        emit(result, as_json)
        if result.failed:
            raise typer.Exit(1)
        return
    # the log first, from what is cheap to know (NVML, the environment, which frameworks are
    # installed); a framework is started only where a cause found needs its build (issue 79, item 10)
    report = run_doctor(start=False)

    def started() -> dict:
        with console.status("starting each installed backend for the fix (imports take a few seconds)"):
            report.update(run_doctor())
        return report

    found = explain(text, Machine.from_doctor(report, dict(os.environ), probe=started), context)
    emit(Explained(found, text.count("\n") + 1 if text.strip() else 0, report), as_json)


def _read(source: str) -> str:
    """A log from a file or standard input (its last MAX_INPUT_BYTES: a failure is said at a log's
    end), or the text itself. What is not a regular file is refused (a FIFO nobody writes to, a
    device, a socket: waiting on one never ends): `-` reads standard input, whatever feeds it."""
    if source == "-":
        data, more = _last_of(sys.stdin.buffer)
    elif os.path.lexists(source):
        try:
            st = os.stat(source)
        except OSError as exc:
            raise UsageError(f"--explain {source}: cannot read it ({exc.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(
                f"--explain {source}: a folder; give a log file, - for standard input, or the message itself"
            )
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(
                f"--explain {source}: a {'FIFO' if stat.S_ISFIFO(st.st_mode) else 'device or socket'}, "
                f"not a log file: give a file, or - to read standard input (`... < {source}`)"
            )
        try:
            with open(source, "rb") as handle:
                handle.seek(max(0, st.st_size - MAX_INPUT_BYTES))
                data, more = _last_of(handle)
        except OSError as exc:
            raise UsageError(f"--explain {source}: cannot read it ({exc.strerror})") from None
        more = more or st.st_size > MAX_INPUT_BYTES
    elif "\n" not in source and " " not in source and (os.sep in source or Path(source).suffix in (".log", ".txt")):
        raise UsageError(
            f"--explain {source}: no such file; give a log file, - for standard input, or the message itself in quotes"
        )
    else:
        return source
    if data.count(b"\x00") > len(data) // 100:  # a log has none; a binary file or /dev/zero has them
        raise UsageError(f"--explain {source}: not a text log (it is mostly NUL bytes): give the log of the run")
    if more:
        terminal.console(stderr=True).print(
            f"note: {source} holds more than {MAX_INPUT_BYTES // 2**20} MiB: its last part was read", markup=False
        )
    return data.decode("utf-8", errors="replace")


def _last_of(stream) -> tuple[bytes, bool]:
    """The last MAX_INPUT_BYTES of a stream, read a chunk at a time (Ctrl-C and SIGTERM stop it
    between chunks), and whether there was more; a stream that never ends (`yes |`) is read for
    MAX_STREAM_BYTES at most."""
    kept, read, more = bytearray(), 0, False
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        kept += chunk
        read += len(chunk)
        if len(kept) > MAX_INPUT_BYTES:
            del kept[: len(kept) - MAX_INPUT_BYTES]
            more = True
        if read >= MAX_STREAM_BYTES:
            more = True
            break
    return bytes(kept), more


def _context(workload: str | None, batch_size: int | None, precision: str | None) -> Context:
    from gpuscout import workloads
    from gpuscout.core.backends import parse_precision

    if workload is not None:
        workloads.get(workload)  # an unknown name is a UsageError naming the known ones
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: a batch is at least 1 sample")
    if precision is not None:
        parse_precision(precision, "--precision")
    return Context(workload=workload, batch_size=batch_size, precision=precision)
