"""Rendering comparisons (analysis/compare.py) as a terminal table, Markdown and CSV."""

from __future__ import annotations

import csv
import io

from rich.markup import escape
from rich.table import Table

from gpuscout.analysis.compare import Comparison, Group
from gpuscout.report import format as fmt

COLUMNS = (
    "workload",
    "by",
    "group",
    "runs",
    "median",
    "ci95_low",
    "ci95_high",
    "ratio",
    "ratio_low",
    "ratio_high",
    "p_value",
    "test",
    "verdict",
)


def _title(c: Comparison) -> str:
    # one device is what every run before `scale` had: named only when it is several
    held = ", ".join(
        f"{k} {v}"
        for k, v in c.held.items()
        if v is not None and not (k == "devices" and v == 1) and not (k in ("mode", "format") and v == "training")
    )
    return f"{c.workload} by {c.by} ({held}; methodology v{c.methodology_version})"


def _ratio(g: Group) -> str:
    if g.ratio is None:
        return "1 (baseline)"
    return f"{g.ratio:.3f} [{g.ratio_low:.3f}–{g.ratio_high:.3f}]"


def _p(g: Group) -> str:
    if g.test is None:
        return fmt.DASH
    return f"p={g.p_value:.3g} ({g.test})" if g.p_value is not None else g.test


def _verdict(g: Group) -> str:
    return {
        "faster": "[green]faster[/]",
        "slower": "[red]slower[/]",
        "no significant difference": "[yellow]no significant difference[/]",
    }.get(g.verdict, escape(g.verdict))


def table(c: Comparison) -> Table:
    t = Table(title=_title(c), title_justify="left", header_style="bold")
    for name in (c.by, "runs", f"median {c.unit} [95% CI]", "ratio [95% CI]", "test", "verdict"):
        t.add_column(name, overflow="fold")
    for g in c.groups:
        ci = f" [{fmt.number(g.ci95_low)}–{fmt.number(g.ci95_high)}]" if g.ci95_low is not None else ""
        t.add_row(g.label, str(len(g.run_ids)), f"{fmt.number(g.median)}{ci}", _ratio(g), _p(g), _verdict(g))
    return t


def markdown(comparisons: list[Comparison]) -> str:
    out = []
    for c in comparisons:
        out.append(f"### {_title(c)}\n")
        out.append(f"| {c.by} | runs | median {c.unit} [95% CI] | ratio [95% CI] | test | verdict |")
        out.append("|---|---|---|---|---|---|")
        for g in c.groups:
            ci = f" [{fmt.number(g.ci95_low)}–{fmt.number(g.ci95_high)}]" if g.ci95_low is not None else ""
            out.append(
                f"| {g.label} | {len(g.run_ids)} | {fmt.number(g.median)}{ci} | {_ratio(g)} | {_p(g)} | {g.verdict} |"
            )
        out.extend(f"\n> note: {n}" for n in c.notes)
        out.append("")
    return "\n".join(out)


def csv_text(comparisons: list[Comparison]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    for c in comparisons:
        for g in c.groups:
            writer.writerow(
                {
                    "workload": c.workload,
                    "by": c.by,
                    "group": g.label,
                    "runs": len(g.run_ids),
                    "median": g.median,
                    "ci95_low": g.ci95_low,
                    "ci95_high": g.ci95_high,
                    "ratio": g.ratio,
                    "ratio_low": g.ratio_low,
                    "ratio_high": g.ratio_high,
                    "p_value": g.p_value,
                    "test": g.test,
                    "verdict": g.verdict,
                }
            )
    return buffer.getvalue()
