"""`gpuscout catalog` on the terminal."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.report import format as fmt
from gpuscout.report import terminal


def print_catalog(cat: Catalog, entries: list[GpuSpec], one: bool) -> None:
    """The GPUs' table; for one GPU (`one`), also its NVML names, sources and every price."""
    out = terminal.console()
    table = Table(title="gpuscout catalog (dense TFLOP/s)", title_justify="left", header_style="bold")
    for name in (
        "id",
        "GPU",
        "segment",
        "arch / CC",
        "memory",
        "GB/s",
        "fp32",
        "tf32",
        "fp16",
        "bf16",
        "interconnect",
        "TDP",
        "ECC/MIG",
        "cheapest price",
    ):
        table.add_column(name, overflow="fold")
    for g in entries:
        prices = cat.prices_for(g.id)
        cloud = sorted((p for p in prices if p.kind == "cloud"), key=lambda p: p.usd)
        bought = [p for p in prices if p.kind == "purchase"]
        shown = (
            f"{cloud[0].usd:.2f} $/h {cloud[0].provider} {cloud[0].date}"
            if cloud
            else f"{bought[0].usd:,.0f} $ {bought[0].date}"
            if bought
            else fmt.DASH
        )
        if (cloud or bought) and (cloud or bought)[0].stale():
            shown += " [yellow](stale)[/]"
        table.add_row(
            g.id,
            g.name,
            g.segment,
            f"{g.architecture} {g.compute_capability}",
            f"{g.memory_gb:g} GB {g.memory_type}",
            f"{g.memory_bandwidth_gbs:,.0f}",
            *(fmt.number(v) for v in (g.fp32_tflops, g.tf32_tflops, g.fp16_tflops, g.bf16_tflops)),
            g.interconnect,
            f"{g.tdp_w:.0f} W",
            f"{'yes' if g.ecc else 'no'} / {g.mig_instances or 'no'}",
            shown,
        )
    # the id names the GPU: its full name is the first to go where the terminal is narrow
    out.print(terminal.detail(table, "segment", "arch / CC", "tf32", "fp16", "interconnect", "TDP", "ECC/MIG", "GPU"))
    if one:
        g = entries[0]
        out.print(
            f"[bold]NVML names[/]: {escape(', '.join(g.nvml_patterns))}  [bold]source[/]: {escape(g.source)}",
            highlight=False,
        )
        for p in cat.prices_for(g.id):
            unit = "USD per GPU-hour" if p.kind == "cloud" else "USD"
            out.print(
                f"[bold]price[/] {p.kind} {escape(p.provider)}: {p.usd:,.3f} {unit} as of {p.date}"
                f"{' (stale)' if p.stale() else ''} — {escape(p.source)}",
                highlight=False,
            )
