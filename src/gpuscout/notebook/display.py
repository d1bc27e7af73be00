"""What gpuscout shows in a notebook cell: rich output (HTML) in Jupyter, text in a terminal
IPython or a plain Python, from the same printers as the command line (report/), so a cell says
what `gpuscout watch`, `doctor` and `results show` say, with the HTML report's plots."""

from __future__ import annotations

import io
from html import escape
from pathlib import Path

from gpuscout.record.watch import WatchRecord
from gpuscout.report import terminal

# Columns of the text: a notebook's output area holds about a hundred
WIDTH = 100


class Shown:
    """One displayable result: Jupyter takes `_repr_html_`, a terminal IPython and print() the text."""

    def __init__(self, text: str, html: str) -> None:
        self.text, self.html = text, html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def display(shown: Shown) -> None:
    """In IPython (a notebook, a terminal IPython): IPython's display, which picks HTML or text;
    elsewhere the text on stdout."""
    shell = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        pass
    if shell is not None:
        from IPython.display import display as ipython_display

        ipython_display(shown)
    else:
        print(shown.text)


def printed(draw) -> tuple[str, str]:
    """What `draw(console)` prints: as plain text, and as HTML with its colours (rich's export)."""
    console = terminal.Terminal(
        file=io.StringIO(),
        width=WIDTH,
        record=True,
        force_terminal=True,
        color_system="truecolor",
        highlight=False,
        force_jupyter=False,
    )
    draw(console)
    html = console.export_html(
        inline_styles=True,
        clear=False,
        code_format='<pre style="font-family:Menlo,Consolas,monospace;font-size:.85em;'
        'line-height:1.3;white-space:pre-wrap">{code}</pre>',
    )
    return console.export_text(styles=False).rstrip() + "\n", html


def watched(record: WatchRecord, store: str | Path | None = None) -> Shown:
    """A watch's verdict as `gpuscout watch` prints it, its timeline plot, and where it is stored."""
    from gpuscout.report import plots, script_plots
    from gpuscout.report.watch import print_watch
    from gpuscout.store import default_store_path

    text, html = printed(lambda console: print_watch(console, record))
    where = (
        f"stored as {record.id} in {Path(store) if store else default_store_path()}; what it would take on "
        f"every GPU: gpuscout recommend --from {record.id}"
    )
    figure = script_plots.watch_timeline(record)
    plot = f'<figure style="margin:0">{plots.svg(figure)}</figure>' if figure is not None else ""
    return Shown(
        text + where + "\n", f'<div class="gpuscout-watch">{html}{plot}<p style="color:#555">{escape(where)}</p></div>'
    )


def doctor(report: dict) -> Shown:
    """`gpuscout doctor`'s table."""
    from gpuscout.report.doctor import print_doctor

    return Shown(*printed(lambda console: print_doctor(report, console)))


def stored(records: list, store_path: Path) -> Shown:
    """Stored runs as `results show` prints them, then the HTML report's sections of them (its plots)."""
    from gpuscout.report import console as console_report
    from gpuscout.report import html as html_report
    from gpuscout.report.document import build, newest_with_telemetry
    from gpuscout.report.watch import print_watch_record

    def draw(console) -> None:
        for number, record in enumerate(records):
            if number:
                console.print("")
            if record.kind == "watch":
                print_watch_record(console, record)
            else:
                console_report.print_run(console, record)

    text, html = printed(draw)
    document = build(records, newest_with_telemetry(records), title=f"{len(records)} run(s) from {store_path}")
    return Shown(text, html + html_report.fragment(document))


def error(message: str) -> Shown:
    """A one-line error, as the command line would print it (never a traceback)."""
    return Shown(f"error: {message}", f'<pre style="color:#b00">error: {escape(message)}</pre>')
