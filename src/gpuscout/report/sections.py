"""A report's shape, whatever renders it: a document of sections, each of text, figures and
tables; and its layout: which sections have something to show (drawn) and which are only named
(report/html.py and report/exporters/as_markdown.py render it; report/document.py builds it
from stored records)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from matplotlib.figure import Figure


@dataclass
class TableData:
    id: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    id: str
    title: str
    text: list[str] = field(default_factory=list)
    figures: list[tuple[str, Callable[[], Figure | None]]] = field(default_factory=list)  # (caption, drawer)
    tables: list[TableData] = field(default_factory=list)
    # tables read before its figures: a summary a row each (a script, a session) that a store of
    # hundreds of runs is read by first (issue 78)
    summary: list[TableData] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)  # (summary, preformatted text)


@dataclass
class Document:
    title: str
    subtitle: str
    sections: list[Section]


@dataclass
class Shown:
    """A section with something to show, its figures drawn and rendered (caption, SVG text or PNG
    bytes: what `laid_out`'s `rendered` made of each)."""

    section: Section
    figures: list[tuple[str, Any]]

    @property
    def text(self) -> list[str]:
        """The section's text; a hint on when a figure is shown goes once one is."""
        return [t for t in self.section.text if not self.figures or not t.startswith(("Shown", "Runs without"))]


def laid_out(doc: Document, rendered: Callable[[Figure], Any]) -> tuple[list[Shown], list[Section]]:
    """The sections with a figure, a row or a detail to show, drawn; and those with nothing, which a
    report names once under its title rather than as empty headings (issue 62: a store of watched
    scripts had six empty sections and an empty table of all runs). Each figure is `rendered` (to
    SVG, to PNG: plots.svg and plots.png close it) as soon as it is drawn: drawn all first, a
    report of 41 watched runs held 41 open figures and matplotlib warned of more than 20 (issue 78)."""
    shown, empty = [], []
    for section in doc.sections:
        figures = [(caption, rendered(fig)) for caption, draw in section.figures if (fig := draw()) is not None]
        if figures or section.details or any(t.rows for t in [*section.summary, *section.tables]):
            shown.append(Shown(section, figures))
        else:
            empty.append(section)
    return shown, empty


def not_shown(empty: list[Section]) -> list[str]:
    """One line for each section with nothing to show: its title, what it holds and when."""
    return [f"{s.title}: {' '.join(s.text)}" for s in empty]
