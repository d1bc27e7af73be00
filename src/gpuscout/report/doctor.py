"""`gpuscout doctor`'s findings on the terminal."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from gpuscout.report import terminal

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def print_doctor(report: dict, out=None) -> None:
    out = out or terminal.console()
    table = Table(title=f"gpuscout doctor — Python {report['python']}", title_justify="left", header_style="bold")
    for column in ("check", "status", "finding", "fix"):
        table.add_column(column, overflow="fold")
    for c in report["checks"]:
        table.add_row(
            escape(c["name"]), f"[{_STYLE[c['status']]}]{c['status']}[/]", escape(c["message"]), escape(c["fix"] or "")
        )
    out.print(table)
    if not report["gpus"]:
        out.print("No NVIDIA GPU found: `gpuscout bench` will run on the CPU.")
