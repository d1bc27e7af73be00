"""What an hour of a GPU costs, and what a benchmark's numbers cost at that rate.

An hour is, in order of precedence: the user's `--price`; for an owned GPU (`--owned`), its
purchase price spread over `--amortise-years` of continuous use plus its power (measured when
there is a measurement, else its TDP) at `--usd-per-kwh`; else the catalog's
on-demand cloud price (the `--provider`'s, else the cheapest one that is not stale, else the
cheapest stale one, marked stale).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout.catalog import Catalog, PriceEntry
from gpuscout.core.errors import UsageError
from gpuscout.record.run import Cost, HourlyCost

HOURS_PER_YEAR = 24 * 365
DEFAULT_AMORTISE_YEARS = 3.0
# A round figure near the 2024 US average for commercial customers (EIA, Electric Power
# Monthly, table 5.6.A: 12.7 cents/kWh); pass your own.
DEFAULT_USD_PER_KWH = 0.15


@dataclass(frozen=True)
class PricingOptions:
    price_usd_per_hour: float | None = None
    provider: str | None = None
    owned: bool = False
    amortise_years: float = DEFAULT_AMORTISE_YEARS
    usd_per_kwh: float = DEFAULT_USD_PER_KWH

    def check(self) -> PricingOptions:
        if self.price_usd_per_hour is not None and self.price_usd_per_hour <= 0:
            raise UsageError(f"--price must be > 0 USD per GPU-hour, got {self.price_usd_per_hour:g}")
        if self.amortise_years <= 0:
            raise UsageError(f"--amortise-years must be > 0, got {self.amortise_years:g}")
        if self.usd_per_kwh < 0:
            raise UsageError(f"--usd-per-kwh must be >= 0, got {self.usd_per_kwh:g}")
        if self.owned and self.provider:
            raise UsageError("--owned prices a GPU you bought; --provider picks a cloud: use one")
        return self


def _pick(entries: list[PriceEntry]) -> PriceEntry:
    fresh = [p for p in entries if not p.stale()]
    return min(fresh or entries, key=lambda p: p.usd)


def hourly_cost(
    catalog: Catalog,
    gpu_id: str,
    options: PricingOptions = PricingOptions(),
    power_w: float | None = None,
    strict: bool = True,
) -> HourlyCost | None:
    """The cost of one GPU-hour, or None when nothing is known (no price, no --price). With
    `strict` (one GPU asked about), a --provider without a price for it is an error."""
    if options.price_usd_per_hour is not None:
        return HourlyCost(
            usd_per_hour=options.price_usd_per_hour, basis=f"--price {options.price_usd_per_hour:g} USD/h", kind="given"
        )
    entries = catalog.prices_for(gpu_id)
    if options.owned:
        purchases = [p for p in entries if p.kind == "purchase"]
        if not purchases:
            return None
        bought = _pick(purchases)
        gpu = next(g for g in catalog.gpus if g.id == gpu_id)
        watts = power_w if power_w is not None else gpu.tdp_w
        capital = bought.usd / (options.amortise_years * HOURS_PER_YEAR)
        energy = watts / 1000 * options.usd_per_kwh
        basis = (
            f"owned: {bought.usd:,.0f} USD ({bought.provider}, {bought.date}) over {options.amortise_years:g} "
            f"years + {watts:.0f} W ({'measured' if power_w is not None else 'TDP'}) at "
            f"{options.usd_per_kwh:g} USD/kWh"
        )
        return HourlyCost(
            usd_per_hour=capital + energy,
            basis=basis,
            kind="owned",
            provider=bought.provider,
            date=bought.date,
            stale=bought.stale(),
            source=bought.source,
        )
    clouds = [p for p in entries if p.kind == "cloud"]
    if options.provider:
        chosen = [p for p in clouds if p.provider == options.provider]
        if not chosen and not strict:
            return None
        if not chosen:
            offered = sorted({p.provider for p in clouds})
            raise UsageError(
                f"no {options.provider!r} price for {gpu_id}: "
                + (f"the catalog has {', '.join(offered)}" if offered else "the catalog has none")
                + "; add one with --catalog FILE or give --price"
            )
        clouds = chosen
    if not clouds:
        return None
    best = _pick(clouds)
    stale = " (stale: over a year old)" if best.stale() else ""
    return HourlyCost(
        usd_per_hour=best.usd,
        basis=f"{best.provider} on demand, {best.date}{stale}",
        kind="cloud",
        provider=best.provider,
        date=best.date,
        stale=best.stale(),
        source=best.source,
    )


def cost_figures(
    hourly: HourlyCost,
    units_per_s: float | None,
    epoch_s: float | None = None,
    tta_s: float | None = None,
    power_w: float | None = None,
) -> Cost:
    """USD per million units (samples, images or tokens: the record's), per epoch and per
    time-to-accuracy run, and energy per million units from the measured power."""
    per_s = hourly.usd_per_hour / 3600
    return Cost(
        hourly=hourly,
        usd_per_million_units=per_s / units_per_s * 1e6 if units_per_s else None,
        usd_per_epoch=per_s * epoch_s if epoch_s else None,
        usd_per_time_to_accuracy=per_s * tta_s if tta_s else None,
        kwh_per_million_units=(power_w / units_per_s * 1e6 / 3.6e6) if power_w and units_per_s else None,
    )
