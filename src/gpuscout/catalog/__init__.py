"""The GPU table (catalog/gpus.toml): dense peaks per precision, validated on load, and the
mapping from NVML's device names to entries."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from gpuscout.spec import Precision

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    nvml_patterns: list[str] = Field(min_length=1)
    architecture: str
    compute_capability: str
    memory_gb: float = Field(gt=0)
    memory_type: str
    memory_bandwidth_gbs: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    tf32_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float | None = Field(default=None, gt=0)
    bf16_tflops: float | None = Field(default=None, gt=0)
    source: str

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


@lru_cache(maxsize=1)
def gpus() -> tuple[GpuSpec, ...]:
    text = resources.files("gpuscout.catalog").joinpath("gpus.toml").read_text(encoding="utf-8")
    entries = tuple(GpuSpec(**entry) for entry in tomllib.loads(text)["gpu"])
    ids = [e.id for e in entries]
    if len(ids) != len(set(ids)):
        raise ValueError("catalog/gpus.toml has duplicate ids")
    return entries


def match(nvml_name: str | None) -> GpuSpec | None:
    """The catalog entry for an NVML device name ("NVIDIA H100 80GB HBM3"), or None."""
    if not nvml_name:
        return None
    for entry in gpus():
        if any(re.search(p, nvml_name, re.IGNORECASE) for p in entry.nvml_patterns):
            return entry
    return None
