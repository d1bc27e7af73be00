"""What `tune` and `scale` do with their report: keep it as JSON beside the store, then print it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import typer
from rich.console import Console
from gpuscout.report import terminal


def save_and_show(report: dict, verb: str, store_path: Path, as_json: bool,
                  render: Callable[[dict, Console], None]) -> Path:
    saved = store_path.parent / verb / f"{report['session']}.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        render(report, terminal.console())
        terminal.console(stderr=True).print(f"runs stored in {store_path}; the report in {saved}", markup=False)
    return saved
