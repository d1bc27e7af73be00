"""The cost options `bench` and `recommend` share (one definition, one help text)."""

from __future__ import annotations

import typer

from gpuscout.pricing import DEFAULT_AMORTISE_YEARS, DEFAULT_USD_PER_KWH

OWNED = typer.Option(False, "--owned", help="Cost GPUs you own: purchase price over --amortise-years plus power.")
AMORTISE_YEARS = typer.Option(DEFAULT_AMORTISE_YEARS, help="--owned: years the purchase price is spread over.")
ELECTRICITY = typer.Option(DEFAULT_USD_PER_KWH, help="--owned: electricity price, USD per kWh.")
