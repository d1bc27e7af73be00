"""`gpuscout catalog`: the GPUs gpuscout knows, their dense peaks, and their dated prices."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from gpuscout import catalog as catalog_lib
from gpuscout.report import format as fmt


def catalog(
    gpu: Optional[str] = typer.Argument(None, help="One GPU (id or name) in full, with its sources."),
    catalog_file: Optional[str] = typer.Option(None, "--catalog", envvar="GPUSCOUT_CATALOG",
                                               help="Your own TOML file of GPUs and prices, merged over the package's."),
    segment: Optional[str] = typer.Option(None, help="Only datacenter, workstation, consumer or edge."),
    as_json: bool = typer.Option(False, "--json", help="Print the catalog as JSON."),
) -> None:
    """List the GPU catalog: memory, bandwidth, dense peak TFLOP/s per precision, interconnect, prices.

    Peaks are dense (never the sparsity figure); a precision the GPU has no tensor-core path for is
    shown as —. Prices older than a year are marked stale.

    Examples:

        gpuscout catalog

        gpuscout catalog h100_sxm            # one GPU, with every source

        gpuscout catalog --segment consumer --json

        gpuscout catalog --catalog my_gpus.toml   # with your own GPUs and prices
    """
    cat = catalog_lib.load(catalog_file)
    entries = [cat.get(gpu)] if gpu else list(cat.gpus)
    if segment:
        from gpuscout.errors import UsageError

        segments = {"datacenter", "workstation", "consumer", "edge"}
        if segment not in segments:
            raise UsageError(f"unknown --segment {segment!r}: choose {', '.join(sorted(segments))}")
        entries = [g for g in entries if g.segment == segment]
    if as_json:
        typer.echo(json.dumps({"user_file": cat.user_file, "gpus": [
            {**g.model_dump(), "prices": [{**p.model_dump(), "stale": p.stale()} for p in cat.prices_for(g.id)]}
            for g in entries]}, indent=2))
        return
    out = Console()
    table = Table(title="gpuscout catalog (dense TFLOP/s)", title_justify="left", header_style="bold")
    for name in ("id", "GPU", "segment", "arch / CC", "memory", "GB/s", "fp32", "tf32", "fp16", "bf16",
                 "interconnect", "TDP", "ECC/MIG", "cheapest price"):
        table.add_column(name, overflow="fold")
    for g in entries:
        prices = cat.prices_for(g.id)
        cloud = sorted((p for p in prices if p.kind == "cloud"), key=lambda p: p.usd)
        bought = [p for p in prices if p.kind == "purchase"]
        shown = (f"{cloud[0].usd:.2f} $/h {cloud[0].provider} {cloud[0].date}" if cloud else
                 f"{bought[0].usd:,.0f} $ {bought[0].date}" if bought else fmt.DASH)
        if (cloud or bought) and (cloud or bought)[0].stale():
            shown += " [yellow](stale)[/]"
        table.add_row(g.id, g.name, g.segment, f"{g.architecture} {g.compute_capability}",
                      f"{g.memory_gb:g} GB {g.memory_type}", f"{g.memory_bandwidth_gbs:,.0f}",
                      *(fmt.number(v) for v in (g.fp32_tflops, g.tf32_tflops, g.fp16_tflops, g.bf16_tflops)),
                      g.interconnect, f"{g.tdp_w:.0f} W",
                      f"{'yes' if g.ecc else 'no'} / {g.mig_instances or 'no'}", shown)
    out.print(table)
    if gpu:
        g = entries[0]
        out.print(f"[bold]NVML names[/]: {', '.join(g.nvml_patterns)}  [bold]source[/]: {g.source}", highlight=False)
        for p in cat.prices_for(g.id):
            unit = "USD per GPU-hour" if p.kind == "cloud" else "USD"
            out.print(f"[bold]price[/] {p.kind} {p.provider}: {p.usd:,.3f} {unit} as of {p.date}"
                      f"{' (stale)' if p.stale() else ''} — {p.source}", highlight=False)
