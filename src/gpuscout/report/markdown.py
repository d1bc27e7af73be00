"""The report as Markdown, with its plots as PNG files beside it."""

from __future__ import annotations

from pathlib import Path

from gpuscout.report import plots
from gpuscout.report.document import Document, TableData
from gpuscout.report.output import MARKDOWN_MARK, write_whole


def _cell(value: str) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(t: TableData) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    return lines


def render(doc: Document, path: Path) -> list[Path]:
    """Write `path` (Markdown) and its PNGs in `<stem>_files/`; returns the files written."""
    assets = path.parent / f"{path.stem}_files"
    assets.mkdir(parents=True, exist_ok=True)
    written, lines = [], [MARKDOWN_MARK, f"# {doc.title}", "", doc.subtitle, ""]
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
            images.append(f"![{caption}]({assets.name}/{image.name})")
        lines += [t for t in section.text if not images or not t.startswith(("Shown", "Runs without"))] + [""]
        lines += images + ([""] if images else [])
        for table in section.tables:
            lines += _table(table) + [""]
        for summary, text in section.details:
            lines += [f"<details><summary>{summary}</summary>", "", "```json", text, "```", "", "</details>", ""]
    write_whole(path, "\n".join(lines))
    return [path, *written]
