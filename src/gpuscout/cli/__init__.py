"""The `gpuscout` command. Verbs are listed in the order of a user's workflow (DESIGN.md)."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from gpuscout import __version__
from gpuscout.errors import UsageError

app = typer.Typer(
    name="gpuscout",
    help="Trustworthy training benchmarks for TensorFlow/Keras on NVIDIA GPUs.\n\n"
         "Start with `gpuscout doctor`, then `gpuscout bench resnet50`.",
    rich_markup_mode="markdown",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuscout {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Trustworthy training benchmarks for TensorFlow/Keras on NVIDIA GPUs."""


from gpuscout.cli import bench, doctor, results  # noqa: E402  (registration order = workflow order)

app.command("doctor")(doctor.doctor)
app.command("bench")(bench.bench)
app.add_typer(results.app, name="results")


def main() -> None:
    err = Console(stderr=True, highlight=False)
    try:
        app(standalone_mode=False)
    except UsageError as exc:
        err.print(f"[red]error:[/] {exc}", markup=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted: runs that finished are stored; nothing half-written was kept")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors and aborts
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            err.print("aborted")
            sys.exit(130)
        raise
