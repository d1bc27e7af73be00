"""What an output format is (hyperfine's exporters: one interface, one module per format), and the
registry that finds one by the name a user gives (`--format NAME`).

A format writes some of three subjects: stored runs (`results export`), comparisons (`compare`)
and the report document (`report`), each a method of that name that it defines:

    runs(records: list[StoredRecord]) -> str
    comparisons(comparisons: list[Comparison]) -> str
    report(doc: Document, assets: str) -> Written   # assets: the folder beside it its files go in

Asking a format for a subject it has no method for is a usage error that names the formats that
do write it. A new format is one module
that defines an `Exporter` and registers it (report/exporters/__init__.py imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gpuscout.core.errors import UsageError

# each subject's words in an error: "unknown --format 'xml' for stored runs"
SUBJECTS = {"runs": "stored runs", "comparisons": "comparisons", "report": "a report"}


@dataclass(frozen=True)
class Written:
    """A report as a format writes it: its text, and the files it refers to beside it (a Markdown
    report's plots, by file name)."""

    text: str
    files: dict[str, bytes] = field(default_factory=dict)


class Exporter:
    name: ClassVar[str]  # the --format value
    title: ClassVar[str]  # its name in a sentence: "a Markdown report"
    suffix: ClassVar[str]  # a file's usual suffix: a report's default --out
    files_beside: ClassVar[bool] = False  # its report refers to files in a folder beside it (assets_folder)


def assets_folder(path: Path) -> Path:
    """Where the files of the report `path` go, for a format that writes files beside it:
    `<stem>_files/` beside it."""
    return path.parent / f"{path.stem}_files"


REGISTRY: dict[str, Exporter] = {}


def register(cls: type[Exporter]) -> type[Exporter]:
    if cls.name in REGISTRY:
        raise ValueError(f"two exporters named {cls.name!r}")
    REGISTRY[cls.name] = cls()
    return cls


def writes(exporter: Exporter, subject: str) -> bool:
    return callable(getattr(exporter, subject, None))


def names(subject: str) -> list[str]:
    """The formats that write `subject`, by name."""
    return sorted(name for name, exporter in REGISTRY.items() if writes(exporter, subject))


def get(name: str, subject: str, also: tuple[str, ...] = ()) -> Exporter:
    """The exporter `name` for `subject`; `also`: the formats the caller writes itself (compare's
    terminal table), named in the error with the rest."""
    exporter = REGISTRY.get(name)
    if exporter is None or not writes(exporter, subject):
        known = sorted([*names(subject), *also])
        choose = f"{', '.join(known[:-1])} or {known[-1]}" if len(known) > 1 else known[0]
        raise UsageError(f"unknown --format {name!r} for {SUBJECTS[subject]}: choose {choose}")
    return exporter
