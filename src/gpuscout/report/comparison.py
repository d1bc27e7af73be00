"""Comparisons (analysis/compare.py) as a terminal table; their Markdown, CSV and JSON are
report/exporters' (each format's module)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.analysis.between_runs import BY_EPOCHS
from gpuscout.analysis.compare import ONE_RUN_EACH, Comparison, Group
from gpuscout.analysis.gate import GateResult
from gpuscout.comparison import Compared
from gpuscout.report import format as fmt


def title(c: Comparison) -> str:
    # one device is what every run before `scale` had: named only when it is several
    held = ", ".join(
        f"{k} {v}"
        for k, v in c.held.items()
        if v is not None and not (k == "devices" and v == 1) and not (k in ("mode", "format") and v == "training")
    )
    return f"{c.workload} by {c.by} ({held}; methodology v{c.methodology_version})"


def ratio_text(g: Group) -> str:
    if g.ratio is None:
        return "1 (baseline)"
    if g.ratio_low is None or g.ratio_high is None:  # one run a side: no interval between runs
        return f"{g.ratio:.3f}"
    return f"{g.ratio:.3f} [{g.ratio_low:.3f}–{g.ratio_high:.3f}]"


def value_heading(c: Comparison) -> str:
    """The figure's column: what each run was read by (analysis/between_runs.py)."""
    return f"{c.unit} by whole epochs [95% CI]" if c.basis == BY_EPOCHS else f"median {c.unit} of windows [95% CI]"


def p_text(g: Group) -> str:
    if g.test is None:
        return fmt.DASH
    return f"p={g.p_value:.3g} ({g.test})" if g.p_value is not None else g.test


def _verdict(g: Group) -> str:
    return {
        "faster": "[green]faster[/]",
        "slower": "[red]slower[/]",
        "no significant difference": "[yellow]no significant difference[/]",
        ONE_RUN_EACH: f"[yellow]{ONE_RUN_EACH}[/]",
    }.get(g.verdict, escape(g.verdict))


def table(c: Comparison) -> Table:
    t = Table(title=title(c), title_justify="left", header_style="bold")
    for name in (c.by, "runs", value_heading(c), "ratio [95% CI]", "test", "verdict"):
        t.add_column(name, overflow="fold")
    for g in c.groups:
        ci = f" [{fmt.number(g.ci95_low)}–{fmt.number(g.ci95_high)}]" if g.ci95_low is not None else ""
        t.add_row(g.label, str(len(g.run_ids)), f"{fmt.number(g.value)}{ci}", ratio_text(g), p_text(g), _verdict(g))
    return t


def print_gate(result: GateResult, out: Console) -> None:
    """The CI gate's verdict, a line a group (its exit status is the command's)."""
    for line in result.lines:
        out.print(line.text, markup=False, highlight=False)


def print_compared(result: Compared, out: Console) -> None:
    """`compare`'s answer in the terminal: the gate's lines, or a table a comparison with its notes."""
    if result.gate is not None:
        print_gate(result.gate, out)
        return
    for c in result.comparisons:
        out.print(table(c))
        for note in c.notes:
            out.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
