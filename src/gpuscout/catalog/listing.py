"""What `gpuscout catalog` lists: GPUs of the catalog, with their prices."""

from __future__ import annotations

from typing import Any, NamedTuple

from gpuscout.catalog.specs import Catalog, GpuSpec


class CatalogListing(NamedTuple):
    catalog: Catalog
    entries: list[GpuSpec]
    one: bool  # one GPU asked for: shown in full, with its sources and every price

    def as_json(self) -> dict[str, Any]:
        return {
            "user_file": self.catalog.user_file,
            "gpus": [
                {
                    **g.model_dump(),
                    "prices": [{**p.model_dump(), "stale": p.stale()} for p in self.catalog.prices_for(g.id)],
                }
                for g in self.entries
            ],
        }
