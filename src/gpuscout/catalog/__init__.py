"""The GPU catalog (catalog/gpus.toml): specifications and dated prices, validated on load; the
user's own file (--catalog FILE or GPUSCOUT_CATALOG) adds GPUs and prices or overrides them by id;
NVML's device names map to entries."""

from gpuscout.catalog.specs import (
    CATALOG_ENV,
    MAX_CATALOG_BYTES,
    STALE_AFTER_DAYS,
    Catalog,
    GpuSpec,
    PriceEntry,
    gpus,
    load,
    match,
)

__all__ = [
    "Catalog",
    "CATALOG_ENV",
    "gpus",
    "GpuSpec",
    "load",
    "match",
    "MAX_CATALOG_BYTES",
    "PriceEntry",
    "STALE_AFTER_DAYS",
]
