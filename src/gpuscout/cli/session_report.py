"""What `tune` and `scale` do with their report: keep it as JSON beside the store, then print it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscout.cli.emit import emit, session_document
from gpuscout.core import outputs
from gpuscout.core.errors import UsageError
from gpuscout.report import terminal


def folder(verb: str, store_path: Path, make: bool = True) -> Path:
    """VERB/ beside the store, the folder of the verb's reports: checked before a session runs
    (make=False), made when its report is saved; through the one door for files (core/outputs/)."""
    return outputs.own_folder(store_path.parent / verb, store_path, f"the {verb} reports' folder", make=make)


def save_and_show(report: Any, verb: str, store_path: Path, as_json: bool) -> Path | None:
    """The report shown (cli/emit.py), and saved as VERB/SESSION.json beside the store (never a
    link or a file gpuscout did not write). Its runs are stored already: a report that cannot be
    saved is said, and still shown."""
    err = terminal.console(stderr=True)
    try:
        saved = outputs.replace_inside(
            folder(verb, store_path),
            f"{report.as_json()['session']}.json",
            session_document(report),
            store_path,
            f"the {verb} report",
            ("json",),
        )
    except (UsageError, OSError) as exc:
        saved = None
        err.print(f"note: the report was not saved ({exc}); its runs are stored in {store_path}", markup=False)
    emit(report, as_json)
    if saved is not None and not as_json:
        err.print(f"runs stored in {store_path}; the report in {saved}", markup=False)
    return saved


def saved_bests(store_path: Path, sessions: set[str]) -> dict[str, Any]:
    """The best setting of each `tune -- COMMAND` session among `sessions` whose report was saved
    beside the store (tune/SESSION.json): its one figure, confirmed between runs, which the HTML
    report shows as the terminal and --json did. A report missing, unreadable or of another shape
    is left out: the report then reads that session from its runs alone."""
    import json

    from pydantic import ValidationError

    from gpuscout.tune.results import Judged

    where = store_path.parent / "tune"
    found = {}
    for session in sorted(sessions):
        path = where / f"{session}.json"
        try:
            best = json.loads(path.read_text()).get("best") if path.is_file() else None
            if isinstance(best, dict) and best.get("confirmation"):
                found[session] = Judged.model_validate(best)
        except (OSError, ValueError, AttributeError, ValidationError):
            continue
    return found
