"""`%load_ext gpuscout`: the `%gpuscout` line magic and the `%%gpuscout` cell magic.

    %%gpuscout watch                 every Model.fit of the cell watched in this kernel
    %%gpuscout watch --store PATH    ... its record stored there
    %%gpuscout watch --mlflow [URI] [--experiment NAME]   ... and logged to MLflow (alone:
                                     MLFLOW_TRACKING_URI's server), as `gpuscout watch --mlflow`
    %gpuscout doctor                 this machine's report
    %gpuscout show RUN [RUN...]      stored runs, with the HTML report's plots
    %gpuscout report                 the store's report, inline
    %gpuscout compare [RUN...] [--by F]   a comparison, inline (by change: with its plot)
    %gpuscout COMMAND ...            any other command of the CLI (compare, results, recommend...),
                                     run in this kernel, its output in the cell

Bad input is one line, as on the command line, never a traceback (IPython's UsageError).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from gpuscout.core.errors import RunError, UsageError

try:  # the notebook extra: IPython's own one-line error (imported here only where IPython is)
    from IPython.core.error import UsageError as IPythonUsageError
except ImportError:  # pragma: no cover - load() is only ever called by IPython
    IPythonUsageError = UsageError

CELL_USAGE = (
    "%%gpuscout runs a cell under watch: %%gpuscout watch [--store PATH] [--label NAME] [--mlflow [URI]] "
    "[--experiment NAME]"
)
CELL_OPTIONS = ("--store", "--label", "--mlflow", "--experiment")


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise IPythonUsageError(f"cannot read `%gpuscout {line}`: {exc}") from None


def _options(words: list[str], allowed: tuple[str, ...], usage: str = CELL_USAGE) -> dict[str, str]:
    """`--name value` pairs (`--mlflow` alone: MLflow's own MLFLOW_TRACKING_URI, as on the command
    line); anything else is a one-line error naming it."""
    from gpuscout.tracking.mlflow_runs import FROM_ENV

    found, i = {}, 0
    while i < len(words):
        word = words[i]
        if word not in allowed:
            raise IPythonUsageError(f"unknown option {word!r}: {usage}")
        value = words[i + 1] if i + 1 < len(words) else None
        if word == "--mlflow" and (value is None or value.startswith("--")):
            found["mlflow"], i = FROM_ENV, i + 1  # given alone
            continue
        if value is None:
            raise IPythonUsageError(f"{word} needs a value: {usage}")
        found[word.lstrip("-")], i = value, i + 2
    return found


def gpuscout(shell, line: str, cell: str | None = None) -> None:
    """`%gpuscout LINE` (cell None) or `%%gpuscout LINE` over CELL, in IPython `shell`."""
    words = _words(line)
    if cell is not None:
        if words[:1] != ["watch"]:
            raise IPythonUsageError(CELL_USAGE)
        return _watch_cell(shell, cell, _options(words[1:], CELL_OPTIONS))
    if not words:
        raise IPythonUsageError(
            "%gpuscout needs a command: doctor, show RUN, report, or any gpuscout command "
            "(%%gpuscout watch on a cell watches its fits)"
        )
    try:
        return _line(words)
    except (UsageError, RunError) as exc:
        raise IPythonUsageError(str(exc)) from None


def _watch_cell(shell, cell: str, options: dict[str, str]) -> None:
    from gpuscout.cli.options import Tracking
    from gpuscout.notebook.live import Watching
    from gpuscout.tracking.mlflow_runs import DEFAULT_EXPERIMENT

    try:  # a bad URI or experiment is said before the cell runs
        store = options.get("store")
        tracking = Tracking(options.get("mlflow"), options.get("experiment", DEFAULT_EXPERIMENT))
        target = tracking.target(Path(store) if store else None)
    except UsageError as exc:
        raise IPythonUsageError(str(exc)) from None
    watching = Watching(options.get("label"), options.get("store"))
    try:
        with watching:
            result = shell.run_cell(cell, store_history=False)
            # the cell's own error was shown by IPython; the record says the cell failed
            failure = result.error_in_exec or result.error_before_exec
            if failure is not None:
                raise failure
    except (UsageError, RunError) as exc:
        raise IPythonUsageError(str(exc)) from None
    except BaseException:
        if watching.record is None:
            raise
        # shown by IPython already: the record and its verdict follow it
    finally:
        _track(target, watching)


def _track(target: tuple[str, str] | None, watching) -> None:
    """The cell's stored record to MLflow, as `watch --mlflow` sends a script's: a server that
    cannot take it costs one warning line under the cell, never the record."""
    if target is None or watching.record is None or watching.live is None:
        return
    from gpuscout.store import Store
    from gpuscout.tracking.sending import send

    with Store(watching.live.store_path) as store:
        send(target, [watching.record], store)


def _line(words: list[str]) -> None:
    import gpuscout.notebook as notebook

    command, rest = words[0], words[1:]
    if command == "doctor" and not rest:
        notebook.doctor()
    elif command == "show":
        store = (
            _options(rest[rest.index("--store") :], ("--store",), "%gpuscout show RUN [RUN...] [--store PATH]").get(
                "store"
            )
            if "--store" in rest
            else None
        )
        ids = rest[: rest.index("--store")] if "--store" in rest else rest
        notebook.show(*ids, store=store)
    elif command == "report" and not any(w in ("--out", "-o") for w in rest):
        notebook.report(store=_options(rest, ("--store",), "%gpuscout report [--store PATH]").get("store"))
    elif command == "compare" and _plain_compare(rest):
        ids = rest[: _ids_before_options(rest)]
        options = _options(rest[len(ids) :], ("--by", "--baseline", "--store"), "%gpuscout compare [RUN...] [--by F]")
        notebook.compare(*ids, by=options.get("by"), baseline=options.get("baseline"), store=options.get("store"))
    else:
        _cli(words)


def _plain_compare(rest: list[str]) -> bool:
    """`compare [RUN...] [--by F] [--baseline G] [--store P]`: shown inline with its plot; any other
    option (--json, --workload...) goes to the command line's compare."""
    options = rest[_ids_before_options(rest) :]
    return all(w in ("--by", "--baseline", "--store") for w in options[::2]) and len(options) % 2 == 0


def _ids_before_options(rest: list[str]) -> int:
    return next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))


def _cli(words: list[str]) -> None:
    """Any other command, as `gpuscout WORDS` would run it, in this kernel: its output goes to the
    cell as it comes. Its exit status other than 0 is a one-line error."""
    import signal

    from gpuscout.cli import app

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        app(words, prog_name="gpuscout", standalone_mode=False)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise IPythonUsageError(f"gpuscout {shlex.join(words)} exited with {exc.code}") from None
    except Exception as exc:  # click's usage errors (an unknown option): one line, as the CLI prints it
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise IPythonUsageError(f"gpuscout {shlex.join(words)}: {message}") from None
    finally:  # the command's Ctrl-C and SIGTERM handling is the CLI's: the kernel's own comes back
        for number, handler in handlers.items():
            signal.signal(number, handler)


def load(ipython) -> None:
    """Registers `%gpuscout` and `%%gpuscout` (IPython's Magics class, made here: IPython is the
    notebook extra's, imported only once IPython loads the extension)."""
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class GpuscoutMagics(Magics):
        @line_cell_magic("gpuscout")
        def run(self, line: str, cell: str | None = None) -> None:
            return gpuscout(self.shell, line, cell)

    ipython.register_magics(GpuscoutMagics)
