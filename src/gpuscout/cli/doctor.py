"""`gpuscout doctor`."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.doctor import run_doctor

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def doctor(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Check driver, GPUs, CUDA/cuDNN as each backend sees them, and XLA; say how to fix problems.

    Exits 1 when a check fails, 0 otherwise (also on a machine with no GPU).

    Examples:

        gpuscout doctor

        gpuscout doctor --json | jq '.checks[] | select(.status != "ok")'
    """
    console = Console(stderr=True)
    with console.status("probing NVML and each installed backend (imports take a few seconds)"):
        report = run_doctor()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        out = Console()
        table = Table(title=f"gpuscout doctor — Python {report['python']}", title_justify="left",
                      header_style="bold")
        for column in ("check", "status", "finding", "fix"):
            table.add_column(column, overflow="fold")
        for c in report["checks"]:
            table.add_row(escape(c["name"]), f"[{_STYLE[c['status']]}]{c['status']}[/]", escape(c["message"]),
                          escape(c["fix"] or ""))
        out.print(table)
        if not report["gpus"]:
            out.print("No NVIDIA GPU found: `gpuscout bench` will run on the CPU.")
    if any(c["status"] == "fail" for c in report["checks"]):
        raise typer.Exit(1)
