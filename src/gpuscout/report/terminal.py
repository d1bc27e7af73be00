"""Where gpuscout's text goes: a terminal of any width, or a log (a pipe, `| tee`, a file).

- Not a terminal: laid out for a log, LOG_WIDTH wide, so a table row is one line a script or a
  reader can follow (grep finds a run's whole row); unless COLUMNS is set in the environment, which
  a shell does not export by itself: `COLUMNS=80 gpuscout catalog | less` is asked for a reader of 80
  columns and gets the terminal's layout at that width (issue 78: rows of ~230 characters wrapped
  unreadably in `less`).
- A table is printed as a table only when every column can be as wide as its longest word (a
  number, an id, a path), so that no number is ever split across lines. Where it cannot, the
  columns marked as detail (`detail()`) are left out first, and one line says which; only a table
  still too wide is printed stacked, one `column: value` line each (issue 62: at 80 columns
  `catalog` and `results list` were cards of 14 lines a GPU). Text columns still wrap between words.

Every console gpuscout prints with comes from `console()`; the one rule lives here instead of in
each of the tables.
"""

from __future__ import annotations

import os
import textwrap

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from gpuscout.core.text import has_controls, printable

# Not a terminal: no wrapping at any width a row or a message reaches (recommend's reasons run
# to 300 characters), so each table row and each message is one line
LOG_WIDTH = 1000
# A table's frame: a border and a space either side of each cell ("│ a │ b │")
BORDER_PER_COLUMN = 3


def plain(cell) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # not markup after all: as it is
            return cell
    return str(cell)


def escaped(item):
    """A str, Text or Table with the control characters in its text written out (`\\x1b`); other
    renderables are left to `Terminal.render`, which escapes them after layout."""
    if isinstance(item, str):
        return printable(item) if has_controls(item) else item
    if isinstance(item, Text):
        return Text(printable(item.plain), style=item.style) if has_controls(item.plain) else item
    if isinstance(item, Table):
        for column in item.columns:
            column.header = escaped(column.header)
            if hasattr(column, "_cells"):  # rich keeps a column's cells there (rich/table.py, Column)
                column._cells = [escaped(c) for c in column._cells]
        item.title = escaped(item.title) if item.title is not None else None
    return item


def longest_word(text: str) -> int:
    return max((len(word) for line in text.splitlines() for word in line.split()), default=0)


def word_widths(table: Table) -> list[int]:
    """Each column's longest word (of its header or a cell): how narrow it can be unbroken."""
    return [
        max([longest_word(plain(column.header))] + [longest_word(plain(c)) for c in column.cells])
        for column in table.columns
    ]


def widest_line(column) -> int:
    return max([len(line) for c in [column.header, *column.cells] for line in plain(c).splitlines()] or [0])


def unbroken_width(widths: list[int]) -> int:
    """The narrowest a table with these columns can be with no word of any cell broken."""
    return sum(widths) + BORDER_PER_COLUMN * len(widths) + 1


def detail(table: Table, *names: str) -> Table:
    """Mark `names` as detail columns: the first left out where the table is too wide for the
    terminal (a wider one, or --json, shows them)."""
    for column in table.columns:
        if plain(column.header) in names:
            column.detail = True  # rich's Column is a plain dataclass: an attribute of ours
    return table


def without_detail(table: Table) -> tuple[Table, list[str]]:
    """The table without its detail columns, and their headers."""
    kept = [c for c in table.columns if not getattr(c, "detail", False)]
    left = [plain(c.header) for c in table.columns if getattr(c, "detail", False)]
    if not left:
        return table, []
    narrow = Table(
        title=table.title,
        title_justify=table.title_justify,
        header_style=table.header_style,
        box=table.box,
        pad_edge=table.pad_edge,
    )
    for column in kept:
        narrow.add_column(column.header, justify=column.justify, overflow=column.overflow)
    cells = [list(c.cells) for c in kept]
    for i in range(table.row_count):
        narrow.add_row(*(column[i] if i < len(column) else "" for column in cells))
    return narrow, left


def kept_whole(items: list[str]) -> list[str]:
    """`items` (GPU names, paths) each marked to be wrapped around, never inside (`Terminal.print`
    reads the mark): "RTX 6000 Ada Generation" is one name, and at 80 columns it broke after
    "RTX" (issue 78)."""
    return [item.replace(" ", KEEP) for item in items]


# A space inside an item kept whole: a character of Unicode's private use area, which no text of
# ours holds, swapped back for a space as the lines are laid out (rich breaks at every whitespace
# character, a no-break space included)
KEEP = "\ue000"


def _laid_out(text: str, width: int) -> str:
    """`text` broken into lines of at most `width` at its spaces, never at a KEEP (which textwrap
    does not take for whitespace); a word longer than the line is left whole."""
    wrap = textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(wrap.fill(paragraph) for paragraph in text.split("\n")).replace(KEEP, " ")


class Terminal(Console):
    def render(self, renderable, options=None):
        """Every segment of text as a terminal should show it: a control character that came in
        with a record's text (an ESC sequence that sets the window title or clears the screen)
        is printed as `\\x1b`, never obeyed. Rich's own styles and cursor moves are separate
        segments (their style, or `control`), and pass as they are."""
        for segment in super().render(renderable, options):
            if segment.control is None and has_controls(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment

    def print(self, *objects, **kwargs) -> None:
        if len(objects) == 1 and isinstance(objects[0], str) and KEEP in objects[0]:
            kwargs["soft_wrap"] = True
            return super().print(_laid_out(escaped(objects[0]), self.width), **kwargs)
        objects = tuple(escaped(o) for o in objects)  # before layout: a cell is measured as it will show
        if len(objects) == 1 and isinstance(objects[0], Table) and objects[0].columns:
            table = objects[0]
            if self._fits(table):
                return super().print(table, **kwargs)
            narrow, left = without_detail(table)
            if left and self._fits(narrow):
                super().print(narrow, **kwargs)
                return super().print(
                    f"(left out at {self.width} columns: {', '.join(left)}; a wider terminal or --json shows them)",
                    style="dim",
                    highlight=False,
                    markup=False,
                )
            return self.print_stacked(table)
        return super().print(*objects, **kwargs)

    def _fits(self, table: Table) -> bool:
        """Whether no word of any cell need be broken at this width; if so, rich is told so (it may
        narrow a column below a word)."""
        widths = word_widths(table)
        if unbroken_width(widths) > self.width:
            return False
        natural = [widest_line(c) for c in table.columns]
        if unbroken_width(natural) > self.width:
            # rich's collapse narrows the widest column first, below its words (an id of 20
            # characters), and the table then overran the terminal: the widths are set here instead,
            # each column its longest word and the spare handed out a character at a time
            spare = self.width - unbroken_width(widths)
            while spare > 0 and any(w < n for w, n in zip(widths, natural)):
                for i in range(len(widths)):
                    if spare and widths[i] < natural[i]:
                        widths[i] += 1
                        spare -= 1
            for column, width in zip(table.columns, widths):
                column.width = width
        for column, width in zip(table.columns, widths):
            column.min_width = max(column.min_width or 0, width)
            column.overflow = "fold"
        return True

    def print_stacked(self, table: Table) -> None:
        """Each row as `column: value` lines: what a table too wide for this terminal becomes."""
        if table.title:
            super().print(Text(plain(table.title), style="bold"))
        headers = [plain(c.header) for c in table.columns]
        cells = [list(c.cells) for c in table.columns]
        rows = max((len(c) for c in cells), default=0)
        pad = max(len(h) for h in headers)
        for i in range(rows):
            for header, column in zip(headers, cells):
                value = plain(column[i]) if i < len(column) else ""
                line = Text.assemble((f"{header:>{pad}}: ", "dim"), " ".join(value.split()) or "—")
                super().print(line, soft_wrap=False, overflow="fold")
            if i < rows - 1:
                super().print("")


def asked_width() -> int | None:
    """COLUMNS from the environment when it holds a width (rich reads it the same way)."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def console(*, stderr: bool = False, **kwargs) -> Terminal:
    out = Terminal(stderr=stderr, **kwargs)
    if not out.is_terminal and "width" not in kwargs:
        out.width = asked_width() or LOG_WIDTH
    return out
