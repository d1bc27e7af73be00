"""`gpuscout catalog` on the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.catalog.listing import CatalogListing
from gpuscout.catalog.pricing import hourly_cost
from gpuscout.report import format as fmt
from gpuscout.report import terminal

# A terminal this wide shows the whole table, the price's where and when beside it
WIDE = 160


def print_listing(listing: CatalogListing, out: Console) -> None:
    print_catalog(*listing, out=out)


def print_catalog(cat: Catalog, entries: list[GpuSpec], one: bool, out: Console | None = None) -> None:
    """The GPUs' table; for one GPU (`one`), also its NVML names, sources and every price."""
    out = out or terminal.console()
    table = Table(title="gpuscout catalog (dense TFLOP/s)", title_justify="left", header_style="bold")
    for name in (
        "id",
        "GPU",
        "segment",
        "arch / CC",
        "memory",
        "type",
        "GB/s",
        "fp32",
        "tf32",
        "fp16",
        "bf16",
        "interconnect",
        "TDP",
        "ECC/MIG",
        "price",
    ):
        table.add_column(name, overflow="fold")
    stale_shown = False
    # where and when under the price in a narrow terminal; one line a row in a wide one or a log
    between = "\n" if out.width < WIDE else " "
    for g in entries:
        shown, stale = _price_cell(cat, g.id, between)
        stale_shown |= stale
        table.add_row(
            g.id,
            g.name,
            g.segment,
            f"{g.architecture} {g.compute_capability}",
            f"{g.memory_gb:g} GB",
            g.memory_type,
            f"{g.memory_bandwidth_gbs:,.0f}",
            *(fmt.number(v) for v in (g.fp32_tflops, g.tf32_tflops, g.fp16_tflops, g.bf16_tflops)),
            g.interconnect,
            f"{g.tdp_w:.0f} W",
            f"{'yes' if g.ecc else 'no'} / {g.mig_instances or 'no'}",
            shown,
        )
    # the id names the GPU: its full name is the first to go where the terminal is narrow
    details = ("segment", "arch / CC", "type", "tf32", "fp16", "interconnect", "TDP", "ECC/MIG", "GPU")
    out.print(terminal.detail(table, *details))
    if stale_shown:
        out.print("* over a year old: check the provider, or add your own price (--catalog FILE)")
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


def _price_cell(cat: Catalog, gpu_id: str, between: str) -> tuple[str, bool]:
    """The price recommend would use (pricing.hourly_cost: the cheapest under a year old, else the
    cheapest stale one), else the list price to buy: the price, `between`, where and when; and
    whether it is stale (marked *, explained under the table)."""
    hourly = hourly_cost(cat, gpu_id, strict=False)
    if hourly is not None:
        mark = "*" if hourly.stale else ""
        return f"{hourly.usd_per_hour:.2f} $/h{mark}{between}{hourly.provider} {hourly.date}", hourly.stale
    bought = min((p for p in cat.prices_for(gpu_id) if p.kind == "purchase"), key=lambda p: p.usd, default=None)
    if bought is None:
        return fmt.DASH, False
    seller = "list price" if bought.provider == "nvidia-msrp" else bought.provider
    return f"{bought.usd:,.0f} $ to buy{between}{seller} {bought.date}", False
