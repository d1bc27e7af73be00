"""The `gpuscout` command. Verbs are listed in the order of a user's workflow (DESIGN.md)."""

from __future__ import annotations

import functools
import inspect
import math
import sys
import typing
from pathlib import Path

import typer
from rich.markup import escape
from typer.core import TyperOption

from gpuscout.core import outputs, signals
from gpuscout.core.errors import RunError, UsageError
from gpuscout.core.versions import __version__
from gpuscout.report import terminal
from gpuscout.tracking.mlflow_runs import FROM_ENV

SUMMARY = (
    "Why your Keras training is slow, what each fix buys on your own script, and which GPU to run it "
    "on: measured on TensorFlow/Keras and NVIDIA GPUs."
)
# One line each, in the order a user meets them (DESIGN.md): their own script first.
START = (
    ("watch -- python train.py", "why it is slow, what to change"),
    ("tune -- python train.py", "what each fix buys on your script"),
    ("doctor", "this machine's setup; --explain an error"),
    ("recommend --workload resnet50", "which GPU, how long, at what cost"),
    ("sweep sweep.yaml", "hyperparameters over every GPU"),
    ("bench resnet50", "standard models, fixed protocol"),
)


def _flag_shows_no_type(display_type_rich):
    """Typer's help prints each option's type (`<str>`, `<float>`), every on/off flag as `<bool>`
    too, which a flag never takes (issue 62: "every flag reads <bool>"): a flag's type column is
    left empty, the others' kept."""

    def display(self, ctx):
        return None if self.is_flag and not self.count else display_type_rich(self, ctx)

    return display


# an older typer (as on the lent GPU machines) has no display_type_rich: its help is left as it is
if hasattr(TyperOption, "display_type_rich"):
    TyperOption.display_type_rich = _flag_shows_no_type(TyperOption.display_type_rich)

app = typer.Typer(
    name="gpuscout",
    help=SUMMARY + "\n\n" + "\n".join(f"- `gpuscout {command}`: {what}" for command, what in START),
    rich_markup_mode="markdown",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion, as typer users expect
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuscout {__version__}")
        raise typer.Exit()


# --verbose: an error in the user's own code (a --model file) shows its traceback, not just its line
VERBOSE = {"on": False}


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Show the traceback of an error in your own code "
        "(a --model file), e.g. gpuscout --verbose bench "
        "--model m.py",
    ),
) -> None:
    """Why your Keras training is slow, what each fix buys, and which GPU to run it on."""
    VERBOSE["on"] = verbose


def handle_errors(command):
    """Turn bad input into one line and exit 2, a failure after runs started into one line and
    exit 1, and Ctrl-C into exit 130 (SIGTERM: 143), for one command.

    Done inside each command (not around the app) because Typer's standalone mode owns the
    outermost layer: it prints tracebacks for anything it does not know.
    """

    flags = option_flags(command)

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        err = terminal.console(stderr=True, highlight=False)
        signals.install()  # Ctrl-C even when the shell left it ignored; SIGTERM handled as Ctrl-C
        try:
            check_numbers(kwargs, flags)
            check_text(kwargs, flags)
            return command(*args, **kwargs)
        except UsageError as exc:
            traceback_text = getattr(exc, "traceback_text", None)
            if traceback_text and VERBOSE["on"]:
                err.print(escape(traceback_text.rstrip()), soft_wrap=True)
            hint = "; `gpuscout --verbose ...` shows the traceback" if traceback_text and not VERBOSE["on"] else ""
            err.print(f"[red]error:[/] {escape(one_line(exc))}{hint}", soft_wrap=True)  # one line, however long
            raise typer.Exit(exc.exit_code) from None
        except RunError as exc:
            err.print(f"[red]error:[/] {escape(one_line(exc))}", soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            signals.ending()
            err.print(f"interrupted ({signals.name()}): runs that finished are stored; nothing half-written was kept")
            raise typer.Exit(signals.exit_code()) from None

    return wrapper


# Options whose value may be left out, with the value that stands for none (click's optional
# values are lost in typer's options): `--mlflow` alone means MLflow's own MLFLOW_TRACKING_URI (issue 63)
OPTIONAL_VALUES = {"--mlflow": FROM_ENV}


def optional_values(argv: list[str]) -> list[str]:
    """An option of OPTIONAL_VALUES with no value after it (the end, `--` or another option) given
    its stand-in, before the command's own `--`; what follows that is the user's command, as it is."""
    end = argv.index("--") if "--" in argv else len(argv)
    out = list(argv)
    for i in range(end):
        if argv[i] in OPTIONAL_VALUES and (i + 1 >= end or argv[i + 1].startswith("-")):
            out[i] = f"{argv[i]}={OPTIONAL_VALUES[argv[i]]}"
    return out


def streams_safe(argv: list[str]) -> int | None:
    """Standard output and error are never the store (`1<> results.sqlite`, `2>> results.sqlite`):
    every command writes to them (and click its help), so they are judged first, as core/outputs
    judges any output, against the store the command line names (--store) or the default one.
    A refusal is said on the other stream where that one is safe (else nowhere): exit 2."""
    from gpuscout.store import default_store_path

    words = argv[: argv.index("--")] if "--" in argv else argv
    named = [b for a, b in zip(words, words[1:]) if a == "--store"] + [
        w.split("=", 1)[1] for w in words if w.startswith("--store=")
    ]
    refused = {}
    for store in [Path(n) for n in named if n] or [default_store_path()]:
        refused.update(outputs.refused_streams(store))
    if not refused:
        return None
    fd, why = next(iter(refused.items()))
    other = 2 if fd == 1 else 1
    if other not in refused:
        stream = sys.stdout if other == 1 else sys.stderr
        try:
            stream.write(f"error: {one_line(why)}\n")
            stream.flush()
        except (OSError, ValueError):
            pass
    return 2


def one_line(message: object) -> str:
    """An error's message as one line: text quoted from elsewhere (a YAML parser's problem, a
    script's error line, an SQLite message, click's own) can hold newlines, and the rule is one line."""
    return " ".join(str(message).split())


def option_flags(command) -> dict[str, str]:
    """Each parameter's option as a user types it: the name declared in `typer.Option("--from")`,
    else Typer's default (`--` and the name with dashes); an argument by its metavar (RUN_ID).
    Read from the command's own signature, not from a click context: Typer 0.29 carries its own
    click and no longer installs click."""
    hints = typing.get_type_hints(command, include_extras=True)
    flags = {}
    for name, param in inspect.signature(command).parameters.items():
        infos = [*getattr(hints.get(name), "__metadata__", ()), param.default]
        argument = next((i for i in infos if isinstance(i, typer.models.ArgumentInfo)), None)
        if argument is not None:
            metavar = (argument.metavar or "").removesuffix("...").strip("[]")
            flags[name] = metavar if metavar.isidentifier() else name.upper()
            continue
        declared = [
            d
            for info in infos
            for d in (*(getattr(info, "param_decls", None) or ()), getattr(info, "default", None))
            if isinstance(d, str) and d.startswith("--")
        ]
        flags[name] = declared[0].split("/")[0] if declared else "--" + name.replace("_", "-")
    return flags


# No option of any command counts past this (2^53: every integer below it is exact as a float,
# and SQLite holds it): `--steps 10**30` or `--limit 10**23` cannot mean anything.
MAX_OPTION = 2**53


def check_text(values: dict, flags: dict[str, str]) -> None:
    """No option or argument of any command is given as empty text: `--only ""` or `catalog ""`
    cannot mean anything, and taken as "not given" it silently does what the user did not ask."""
    for name, value in values.items():
        if isinstance(value, (list, tuple)) and not flags.get(name, "").startswith("--"):
            continue  # an argument list: a watched command's own words may well be empty
        given = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, str) and not v.strip() for v in given):
            raise UsageError(f"{flags.get(name, name.upper())} is empty: give a value, or leave it out")


def check_numbers(values: dict, flags: dict[str, str]) -> None:
    """Every numeric option of every command is a finite number from 0 to MAX_OPTION: click reads
    "nan", "inf" and "-5" as floats, and a timeout of nan never fires, a price of inf ranks
    nothing. Checked once here, for options added later too; each option's own bounds stay with it."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value) or value < 0 or value > MAX_OPTION:
            flag = flags.get(name, "--" + name.replace("_", "-"))
            shown = f"{value!r}" if len(repr(value)) <= 24 else f"a number of {len(str(int(value)))} digits"
            raise UsageError(f"{flag} takes a finite number from 0 to {MAX_OPTION:,}, got {shown}")


from gpuscout.cli import bench, catalog, compare, doctor, recommend, report, results, scale, sweep, tune, watch  # noqa: E402

# registration order = workflow order: the user's own script first (watch, tune), then the
# machine, the GPU to buy, the sweep, and the standard benchmarks and their results.
# Everything after watch's first word is the command's own (its --options too), `--` or not.
app.command("watch", help=watch.HELP, context_settings={"allow_interspersed_args": False})(handle_errors(watch.watch))
app.command("tune", help=tune.HELP)(handle_errors(tune.tune))
app.command("doctor", help=doctor.HELP)(handle_errors(doctor.doctor))
app.command("recommend", help=recommend.HELP)(handle_errors(recommend.recommend))
app.command("sweep", help=sweep.HELP)(handle_errors(sweep.sweep))
app.command("bench", help=bench.HELP)(handle_errors(bench.bench))
app.command("scale", help=scale.HELP)(handle_errors(scale.scale))
app.command("catalog", help=catalog.HELP)(handle_errors(catalog.catalog))
app.add_typer(results.app, name="results")
app.command("compare", help=compare.HELP)(handle_errors(compare.compare))
app.command("report", help=report.HELP)(handle_errors(report.report))


def main(argv: list[str] | None = None) -> None:
    """The command line, with click's own errors (an unknown option or command, a value of the
    wrong type, a missing argument) as one line and exit 2, like gpuscout's: click's standalone
    mode draws them as a box of five lines that a log or `| grep error:` cuts apart."""
    # Typer 0.29 carries its own click: its errors live in typer._click (no public name)
    from typer._click import exceptions as click_errors

    argv = optional_values(list(sys.argv[1:] if argv is None else argv))
    code = streams_safe(argv)
    if code is not None:
        raise SystemExit(code)
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="gpuscout", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:  # `gpuscout` alone: the help, as before
        exc.show()
        code = exc.exit_code
    except click_errors.UsageError as exc:
        where = f"`{exc.ctx.command_path} --help`" if exc.ctx is not None else "`gpuscout --help`"
        terminal.console(stderr=True, highlight=False).print(
            f"[red]error:[/] {escape(one_line(exc.format_message()))} ({where} lists what it takes)", soft_wrap=True
        )
        code = exc.exit_code
    except click_errors.ClickException as exc:
        terminal.console(stderr=True, highlight=False).print(
            f"[red]error:[/] {escape(one_line(exc.format_message()))}", soft_wrap=True
        )
        code = exc.exit_code
    except typer.Abort:  # click's prompt interrupted: as Ctrl-C
        code = 130
    except KeyboardInterrupt:  # a second Ctrl-C that came before the command could say it was ending
        signals.ending()
        code = signals.exit_code()
    raise SystemExit(code if isinstance(code, int) else 0)
