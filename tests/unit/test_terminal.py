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


def test_output_that_is_not_a_terminal_is_laid_out_for_a_log_unless_columns_asks_for_a_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = terminal.console(file=io.StringIO())
    assert not out.is_terminal and out.width == terminal.LOG_WIDTH
    out.print(wide_table())
    rows = [line for line in out.file.getvalue().splitlines() if line.startswith("│")]
    assert len(rows) == 1 and all(n in rows[0] for n in NUMBERS)  # one line per row
    # `COLUMNS=80 gpuscout catalog | less` (issue 78): the 80-column layout, every number whole
    for columns, width in (("80", 80), ("", terminal.LOG_WIDTH), ("wide", terminal.LOG_WIDTH)):
        monkeypatch.setenv("COLUMNS", columns)
        out = terminal.console(file=io.StringIO())
        assert out.width == width, columns
    monkeypatch.setenv("COLUMNS", "80")
    out = terminal.console(file=io.StringIO())
    out.print(wide_table())
    text = out.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80 and all(n in text for n in NUMBERS)


def test_a_name_kept_whole_is_wrapped_around_never_inside():
    names = ["A100 PCIe 40GB", "RTX 6000 Ada Generation", "Jetson AGX Orin 64GB"]
    for width in (30, 44, 80):
        out = terminal.Terminal(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
        out.print(f"also trains it: {', '.join(terminal.kept_whole(names))} (--top 25 shows them)", markup=False)
        text = out.file.getvalue()
        assert terminal.KEEP not in text and max(len(line) for line in text.splitlines()) <= width
        assert all(name in text.splitlines()[i] for name in names for i in [_line_of(text, name)]), text
    assert terminal.KEEP not in "".join(names)


def _line_of(text: str, name: str) -> int:
    """The line `name` starts on (its first word), to hold that the whole name is there."""
    return next(i for i, line in enumerate(text.splitlines()) if name.split()[0] in line.split())


def test_counts_agree_with_their_nouns():
    from gpuscout.core.units import counted

    assert counted(1, "trial") == "1 trial" and counted(2, "trial") == "2 trials"
    assert counted(0, "run") == "0 runs" and counted(1_024, "step") == "1,024 steps"
    assert counted(1, "worker process", "worker processes") == "1 worker process"
    assert counted(3, "worker process", "worker processes") == "3 worker processes"
    assert counted(1.5, "epoch") == "1.5 epochs" and counted(1.0, "epoch") == "1 epoch"


def test_detail_columns_are_left_out_before_a_table_is_stacked_and_it_says_which():
    """`catalog` and `results list` at 80 columns were stacked cards (issue 62): their detail
    columns go first, one line names them, and the rest stays a table."""
    t = terminal.detail(wide_table(), "created (UTC)", "why")
    text = render(80, t)
    assert re.search(r"^[│┃]", text, re.M) and "created" not in text.split("(left out")[0]
    assert "(left out at 80 columns: created (UTC), why; a wider terminal or --json shows them)" in " ".join(
        text.split()
    )
    assert all(n in text for n in NUMBERS[:3]) and max(len(line) for line in text.splitlines()) <= 80
    wide = render(300, terminal.detail(wide_table(), "why"))
    assert "left out" not in wide and "compute-bound" in wide  # where it fits, every column


def test_a_table_at_the_edge_keeps_its_border_and_its_long_ids_whole():
    """A column of one 20-character id beside wrappable text: rich's own collapse narrowed the id
    below its length and the table ran one character past the terminal (the catalog's last
    border cut off); the widths are set so the table is exactly as wide as the terminal allows."""
    t = Table()
    for name in ("id", "GPU", "memory", "price"):
        t.add_column(name)
    t.add_row("jetson_agx_orin_64gb", "NVIDIA Jetson AGX Orin 64GB", "64 GB LPDDR5", "1,999 $ 2024-06 (stale)")
    t.add_row("h200", "NVIDIA H200 SXM 141GB", "141 GB HBM3e", "4.54 $/h spheron 2026-03")
    widths = terminal.word_widths(t)
    edge = terminal.unbroken_width(widths)
    text = render(edge, t)
    lines = text.splitlines()
    assert max(len(line) for line in lines) == edge and all(line.endswith(("┃", "│", "┓", "┩", "┘")) for line in lines)
    assert "jetson_agx_orin_64gb" in text


def test_a_watch_of_one_worker_says_one_worker():
    """issue 78: "PyDataset (1 worker threads)"."""
    from gpuscout.report.watch import _input
    from tests.records import fit_events, make_watch_record

    record = make_watch_record(events=fit_events(wait_s=0.3, input_type="PyDataset"))
    for workers, processes, said in ((1, False, "1 worker thread)"), (4, True, "4 worker processes)")):
        record.main.input_workers, record.main.input_multiprocessing = workers, processes
        assert _input(record.main) == f"PyDataset ({said}"
