"""`gpuscout doctor`."""

from __future__ import annotations

import json

import typer

from gpuscout.cli.options import AsJson
from gpuscout.doctor import run_doctor
from gpuscout.report.doctor import print_doctor
from gpuscout.report import terminal

HELP = """Check driver, GPUs, CUDA/cuDNN as each backend sees them, and XLA; say how to fix problems.

Exits 1 when a check fails, 0 otherwise (also on a machine with no GPU).

Examples:

    gpuscout doctor

    gpuscout doctor --json | jq '.checks[] | select(.status != "ok")'
"""


def doctor(as_json: AsJson = False) -> None:
    console = terminal.console(stderr=True)
    with console.status("probing NVML and each installed backend (imports take a few seconds)"):
        report = run_doctor()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_doctor(report)
    if any(c["status"] == "fail" for c in report["checks"]):
        raise typer.Exit(1)
