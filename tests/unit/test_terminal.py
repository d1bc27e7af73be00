"""Tables fit the width they get, and no number is ever split across lines."""

import io
import re

from rich.table import Table

from gpuscout.report import terminal

NUMBERS = ["8,355,537", "14,400,663.7", "0.00794", "2026-11-21T00:00:00+00:00"]


def wide_table() -> Table:
    t = Table(title="runs")
    for name in ("id", "created (UTC)", "throughput [95% CI]", "tokens/s", "p", "why"):
        t.add_column(name)
    t.add_row(
        "run00001",
        NUMBERS[3],
        "[bold]8,355,537[/] [8,300,000–8,400,000]",
        NUMBERS[1],
        NUMBERS[2],
        "measured (2 references); compute-bound workload: bf16 peak 1.1x the H100's",
    )
    return t


def render(width: int, table: Table, tty: bool = True) -> str:
    out = terminal.Terminal(file=io.StringIO(), width=width, force_terminal=tty, color_system=None)
    out.print(table)
    return out.file.getvalue()


def test_a_table_too_wide_for_80_columns_is_stacked_with_every_number_whole():
    text = render(80, wide_table())
    for number in NUMBERS + ["8,300,000–8,400,000"]:
        assert number in text, number
    assert "   tokens/s: 14,400,663.7" in text and not re.search(r"^[│┃]", text, re.M)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_table_that_fits_keeps_its_words_whole_and_wraps_text_between_them():
    t = Table()
    t.add_column("value")
    t.add_column("note")
    t.add_row("12,345,678", "a long explanation " * 4)
    text = render(60, t)
    assert "12,345,678" in text and text.count("│") > 4  # a table, its note wrapped over lines
    assert all(len(line) <= 60 for line in text.splitlines())


def test_output_that_is_not_a_terminal_is_laid_out_for_a_log(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = terminal.console(file=io.StringIO())
    assert not out.is_terminal and out.width == terminal.LOG_WIDTH
    out.print(wide_table())
    rows = [line for line in out.file.getvalue().splitlines() if line.startswith("│")]
    assert len(rows) == 1 and all(n in rows[0] for n in NUMBERS)  # one line per row
