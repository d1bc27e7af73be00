"""The GPU catalog's entries (specifications and dated prices) as typed models, loaded from
catalog/gpus.toml and the user's file and validated, and NVML's device names matched to them."""

from __future__ import annotations

import datetime as dt
import difflib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuscout.core import inputs
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CATALOG_ENV = "GPUSCOUT_CATALOG"
STALE_AFTER_DAYS = 365


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    name: str
    segment: Literal["datacenter", "workstation", "consumer", "edge"]
    nvml_patterns: list[str] = Field(min_length=1)
    architecture: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    memory_gb: float = Field(gt=0)
    memory_type: str
    memory_bandwidth_gbs: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    tf32_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float | None = Field(default=None, gt=0)
    bf16_tflops: float | None = Field(default=None, gt=0)
    tf32_sparse_tflops: float | None = Field(default=None, gt=0)
    fp16_sparse_tflops: float | None = Field(default=None, gt=0)
    bf16_sparse_tflops: float | None = Field(default=None, gt=0)
    nvlink_gbs: float | None = Field(default=None, gt=0)  # None: PCIe only
    pcie_gen: int | None = Field(default=None, ge=1, le=7)
    tdp_w: float = Field(gt=0)
    ecc: bool
    mig_instances: int = Field(ge=0)  # 0: no MIG
    source: str = Field(min_length=10)

    @model_validator(mode="after")
    def _dense_is_not_sparse(self) -> GpuSpec:
        for path in ("tf32", "fp16", "bf16"):
            dense, sparse = getattr(self, f"{path}_tflops"), getattr(self, f"{path}_sparse_tflops")
            if dense is not None and sparse is not None and dense > sparse:
                raise ValueError(
                    f"{path}_tflops {dense} is above its sparse figure {sparse}: "
                    "the dense and sparse figures are swapped"
                )
        return self

    @property
    def short_name(self) -> str:
        """The name without the maker's prefixes, as people say it (NVIDIA GeForce RTX 4090: RTX 4090)."""
        return self.name.removeprefix("NVIDIA ").removeprefix("GeForce ")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def interconnect(self) -> str:
        return (
            f"NVLink {self.nvlink_gbs:g} GB/s"
            if self.nvlink_gbs
            else (f"PCIe Gen{self.pcie_gen}" if self.pcie_gen else "on-chip (shared memory)")
        )

    def peak_tflops(self, precision: Precision) -> tuple[float | None, str]:
        """Dense peak for a run's precision and the name of the path it assumes.

        fp32 runs use TF32 tensor cores where the GPU has them: TensorFlow and XLA enable TF32
        for float32 matrix products by default on Ampere and newer.
        """
        if precision is Precision.mixed_bfloat16:
            return self.bf16_tflops, "bf16"
        if precision is Precision.mixed_float16:
            return self.fp16_tflops, "fp16"
        if self.tf32_tflops is not None:
            return self.tf32_tflops, "tf32"
        return self.fp32_tflops, "fp32"


class PriceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    kind: Literal["cloud", "purchase"]  # cloud: USD per GPU-hour on demand; purchase: USD per GPU
    provider: str
    usd: float = Field(gt=0)
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")  # when the price held
    source: str = Field(min_length=5)

    @property
    def as_of(self) -> dt.date:
        parts = [int(p) for p in self.date.split("-")] + [1]
        return dt.date(parts[0], parts[1], parts[2])

    def stale(self, today: dt.date | None = None) -> bool:
        return ((today or dt.date.today()) - self.as_of).days > STALE_AFTER_DAYS


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[GpuSpec, ...]
    prices: tuple[PriceEntry, ...]
    user_file: str | None

    def get(self, key: str) -> GpuSpec:
        """By id, or by name / NVML name; unknown names get the close ones suggested (exit 2)."""
        for entry in self.gpus:
            if key.lower() in (entry.id, entry.name.lower()):
                return entry
        found = match(key, self)
        if found:
            return found
        ids = [g.id for g in self.gpus]
        # the same family first (h101 -> h100_*), then what is spelled alike
        stem = key.lower()[: max(2, len(key) - 1)]
        close = [i for i in ids if i.startswith(stem)]
        close += [i for i in difflib.get_close_matches(key.lower(), ids, n=3, cutoff=0.4) if i not in close]
        close = close[:3]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(
            f"unknown GPU {key!r}: {hint}see `gpuscout catalog` for the ids, or add it with --catalog FILE"
        )

    def prices_for(self, gpu_id: str) -> list[PriceEntry]:
        return [p for p in self.prices if p.gpu == gpu_id]


def _load_toml(text: str, origin: str) -> dict:
    """The TOML's tables; its values within inputs.bounded's bounds (TOML has `inf` and `nan`: a
    price of inf would rank nothing; TOML itself refuses a key given twice)."""
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"catalog {origin}: not valid TOML ({exc})") from None
    except ValueError:  # an integer past Python's 4,300 digits
        raise UsageError(f"catalog {origin}: an integer of thousands of digits: not a catalog") from None
    return inputs.bounded(parsed, f"catalog {origin}", "a catalog")


def _entry_line(text: str, table: str, index: int) -> int:
    """The line of the index-th [[table]] header (TOML parsers give no positions)."""
    count = -1
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == f"[[{table}]]":
            count += 1
            if count == index:
                return number
    return 0


def _validated(raw: dict, text: str, origin: str, partial_ids: set[str] = frozenset()):
    unknown = set(raw) - {"gpu", "price"}
    if unknown:
        raise UsageError(f"catalog {origin}: unknown table(s) {', '.join(sorted(unknown))}: use [[gpu]] and [[price]]")
    gpus, overrides, prices = [], [], []
    for table, model, out in (("gpu", GpuSpec, gpus), ("price", PriceEntry, prices)):
        for index, entry in enumerate(raw.get(table, [])):
            try:
                if table == "gpu" and entry.get("id") in partial_ids and set(entry) != set(GpuSpec.model_fields):
                    overrides.append(entry)  # some fields of a known GPU: merged below
                    continue
                out.append(model(**entry))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or table
                raise UsageError(
                    f"catalog {origin}: [[{table}]] #{index + 1} (line {_entry_line(text, table, index)}"
                    f"{', id ' + repr(entry.get('id')) if entry.get('id') else ''}): {where}: "
                    f"{first['msg'].removeprefix('Value error, ')}"
                ) from None
            except TypeError as exc:
                raise UsageError(f"catalog {origin}: [[{table}]] #{index + 1}: {exc}") from None
    return gpus, overrides, prices


@lru_cache(maxsize=8)
def _load(user_file: str | None) -> Catalog:
    text = resources.files("gpuscout.catalog").joinpath("gpus.toml").read_text(encoding="utf-8")
    gpus, _, prices = _validated(_load_toml(text, "gpus.toml"), text, "gpus.toml (the package's)")
    by_id = {g.id: g for g in gpus}
    if len(by_id) != len(gpus):
        raise ValueError("catalog/gpus.toml has duplicate ids")
    if user_file:
        path = Path(user_file).expanduser()
        if not path.exists():
            raise UsageError(f"catalog file not found: {path}")
        user_text = inputs.read_text(
            path, "a catalog (TOML: [[gpu]] and [[price]] tables, docs/catalog.md)", MAX_CATALOG_BYTES
        )
        new, overrides, user_prices = _validated(_load_toml(user_text, str(path)), user_text, str(path), set(by_id))
        for entry in new:
            by_id[entry.id] = entry
        for partial in overrides:
            try:
                by_id[partial["id"]] = GpuSpec(**{**by_id[partial["id"]].model_dump(), **partial})
            except ValidationError as exc:
                first = exc.errors()[0]
                raise UsageError(
                    f"catalog {path}: override of {partial['id']!r}: "
                    f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
                ) from None
        # a user's price for the same GPU, kind and provider replaces the package's
        replaced = {(p.gpu, p.kind, p.provider) for p in user_prices}
        prices = [p for p in prices if (p.gpu, p.kind, p.provider) not in replaced] + user_prices
    unknown = sorted({p.gpu for p in prices} - set(by_id))
    if unknown:
        raise UsageError(f"catalog: prices name GPUs that are not in it: {', '.join(unknown)}")
    return Catalog(tuple(by_id.values()), tuple(prices), user_file)


# A user's catalog is a page of TOML; the package's own is 30 KiB.
MAX_CATALOG_BYTES = 4 * inputs.MiB


def load(user_file: str | None = None) -> Catalog:
    """The package's catalog, merged with the user's file (argument, else $GPUSCOUT_CATALOG)."""
    return _load(user_file or os.environ.get(CATALOG_ENV) or None)


def gpus() -> tuple[GpuSpec, ...]:
    return load().gpus


def match(nvml_name: str | None, catalog: Catalog | None = None) -> GpuSpec | None:
    """The catalog entry for an NVML device name ("NVIDIA H100 80GB HBM3"), or None."""
    if not nvml_name:
        return None
    for entry in (catalog or load()).gpus:
        if any(re.search(p, nvml_name, re.IGNORECASE) for p in entry.nvml_patterns):
            return entry
    return None
