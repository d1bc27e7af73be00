"""The report as Markdown, with its plots as PNG files beside it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from gpuscout.core.text import printable
from gpuscout.report import plots
from gpuscout.report.document import Document, TableData
from gpuscout.report.output import MARKDOWN_MARK, write_whole


# CommonMark lets a backslash escape any ASCII punctuation; these would otherwise start emphasis,
# code, links, HTML, headings or table cells when they come with a record's text (a model named
# "a|b" split its row; a backtick opened code to the end of the page).
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def _inline(value) -> str:
    """Record text (a workload, a GPU name, a user's title) as literal Markdown on one line."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", printable(" ".join(str(value).split())))


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text`, so that none closes it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _table(t: TableData) -> list[str]:
    lines = ["| " + " | ".join(_inline(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(_inline(c) for c in row) + " |" for row in t.rows]
    return lines


def render(doc: Document, path: Path) -> list[Path]:
    """Write `path` (Markdown) and its PNGs in `<stem>_files/`; returns the files written."""
    assets = path.parent / f"{path.stem}_files"
    assets.mkdir(parents=True, exist_ok=True)
    written, lines = [], [MARKDOWN_MARK, f"# {_inline(doc.title)}", "", _inline(doc.subtitle), ""]
    for section in doc.sections:
        lines += [f"## {section.title}", ""]
        images = []
        for index, (caption, draw) in enumerate(section.figures):
            fig = draw()
            if fig is None:
                continue
            image = assets / f"{section.id}-{index}.png"
            plots.png(fig, image)
            written.append(image)
            images.append(f"![{_inline(caption)}]({assets.name}/{image.name})")
        lines += [t for t in section.text if not images or not t.startswith(("Shown", "Runs without"))] + [""]
        lines += images + ([""] if images else [])
        for table in section.tables:
            lines += _table(table) + [""]
        for summary, text in section.details:  # HTML around a fence: escaped as HTML, fenced against backticks
            fence = _fence(text)
            lines += [f"<details><summary>{html.escape(printable(summary))}</summary>", "", f"{fence}json", text, fence,
                      "", "</details>", ""]
    write_whole(path, "\n".join(lines))
    return [path, *written]
