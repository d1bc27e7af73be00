"""Markdown: comparisons as a table each, and the report with its plots as PNG files beside it."""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from gpuscout.core.outputs import MARKDOWN_MARK
from gpuscout.core.text import printable
from gpuscout.report import format as fmt
from gpuscout.report.comparison import p_text, ratio_text, title, value_heading
from gpuscout.report.exporters.base import Exporter, Written, register

if TYPE_CHECKING:
    from gpuscout.report.sections import Document, TableData

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


def render(doc: Document, assets: str) -> tuple[str, dict[str, bytes]]:
    """The report as Markdown, and its PNGs by file name, which it links in the folder `assets`
    (exporters.base.assets_folder's name; cli/report.py writes them all through core/outputs)."""
    from gpuscout.report import plots  # matplotlib: only where a report is drawn
    from gpuscout.report.sections import laid_out, not_shown

    images_of, lines = {}, [MARKDOWN_MARK, f"# {_inline(doc.title)}", "", _inline(doc.subtitle), ""]
    shown, empty = laid_out(doc, plots.png)
    if empty:
        lines += [f"Nothing in this store for {len(empty)} section(s):", ""]
        lines += [f"- {_inline(line)}" for line in not_shown(empty)] + [""]
    for s in shown:
        section = s.section
        lines += [f"## {section.title}", ""]
        images = []
        for index, (caption, png) in enumerate(s.figures):
            name = f"{section.id}-{index}.png"
            images_of[name] = png
            images.append(f"![{_inline(caption)}]({assets}/{name})")
        lines += s.text + [""]
        for table in section.summary:
            lines += _table(table) + [""]
        lines += images + ([""] if images else [])
        for table in section.tables:
            lines += _table(table) + [""]
        for summary, text in section.details:  # HTML around a fence: escaped as HTML, fenced against backticks
            fence = _fence(text)
            lines += [
                f"<details><summary>{html.escape(printable(summary))}</summary>",
                "",
                f"{fence}json",
                text,
                fence,
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines), images_of


def comparison_tables(comparisons: list) -> str:
    out = []
    for c in comparisons:
        out.append(f"### {title(c)}\n")
        out.append(f"| {c.by} | runs | {value_heading(c)} | ratio [95% CI] | test | verdict |")
        out.append("|---|---|---|---|---|---|")
        for g in c.groups:
            ci = f" [{fmt.number(g.ci95_low)}–{fmt.number(g.ci95_high)}]" if g.ci95_low is not None else ""
            out.append(
                f"| {g.label} | {len(g.run_ids)} | {fmt.number(g.value)}{ci} | {ratio_text(g)} | {p_text(g)} "
                f"| {g.verdict} |"
            )
        out.extend(f"\n> note: {n}" for n in c.notes)
        out.append("")
    return "\n".join(out)


@register
class Markdown(Exporter):
    name = "markdown"
    title = "Markdown"
    suffix = ".md"
    files_beside = True

    def comparisons(self, comparisons) -> str:
        return comparison_tables(comparisons) + "\n"

    def report(self, doc, assets: str) -> Written:
        text, images = render(doc, assets)
        return Written(text, images)
