"""`gpuscout catalog`: the GPUs gpuscout knows, their dense peaks, and their dated prices."""

from __future__ import annotations

import typer

from gpuscout import catalog as catalog_lib
from gpuscout.catalog.listing import CatalogListing
from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson
from gpuscout.core.errors import UsageError

HELP = """List the GPU catalog: memory, bandwidth, dense peak TFLOP/s per precision, interconnect, prices.

Peaks are dense (never the sparsity figure); a precision the GPU has no tensor-core path for is
shown as —. Prices older than a year are marked stale.

Examples:

    gpuscout catalog

    gpuscout catalog h100_sxm            # one GPU, with every source

    gpuscout catalog --segment consumer --json

    gpuscout catalog --catalog my_gpus.toml   # with your own GPUs and prices
"""


def catalog(
    gpu: str | None = typer.Argument(None, help="One GPU (id or name) in full, with its sources."),
    catalog_file: str | None = typer.Option(
        None,
        "--catalog",
        envvar="GPUSCOUT_CATALOG",
        help="Your own TOML file of GPUs and prices, merged over the package's.",
    ),
    segment: str | None = typer.Option(None, help="Only datacenter, workstation, consumer or edge."),
    as_json: AsJson = False,
) -> None:
    cat = catalog_lib.load(catalog_file)
    entries = [cat.get(gpu)] if gpu else list(cat.gpus)
    if segment:
        segments = {"datacenter", "workstation", "consumer", "edge"}
        if segment not in segments:
            raise UsageError(f"unknown --segment {segment!r}: choose {', '.join(sorted(segments))}")
        entries = [g for g in entries if g.segment == segment]
    emit(CatalogListing(cat, entries, one=bool(gpu)), as_json)
