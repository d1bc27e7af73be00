"""What every command that reads the store shows the same way."""

from __future__ import annotations

from rich.markup import escape

from gpuscout.report import terminal
from gpuscout.store import Store


def warn_unreadable(store: Store) -> None:
    """One line per stored record a read left out because it does not validate."""
    err = terminal.console(stderr=True, highlight=False)
    for run_id, why in store.unreadable.items():
        err.print(
            f"[yellow]warning[/]: run {escape(run_id)} in {escape(str(store.path))} is damaged and was "
            f"left out ({escape(why)})",
            soft_wrap=True,
        )
