"""Training throughput on a GPU where nobody measured it: scaled from where somebody did.

A step is bound partly by the tensor cores and partly by memory bandwidth, and which one
depends on the workload's arithmetic intensity I (training FLOPs per byte of activations kept
per sample: convolutions with batch norm are low, large matrix products high). From a reference
throughput X_r measured on GPU r, the prediction for GPU g is

    X_g = X_r * (P_g / P_r) ** a * (B_g / B_r) ** (1 - a),    a = I^k / (I^k + I0^k)

with P the dense peak of the precision's path (catalog) and B the memory bandwidth. With several
references the prediction is the geometric mean of theirs. I0 and k are fitted on the published
table (catalog/published.toml) by `fit`; `loo_errors` predicts each published entry from the
others of its group with constants fitted without it, and that error is the one docs/catalog.md
states and tests/unit/test_predict.py checks.

With no reference at all (a model nobody ran), a reference is made up on the H200 from the
model FLOP utilisation gpuscout measured there for its kind of model, with a wider band.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.core.spec import Precision

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# Fitted on catalog/published.toml by fit() (tests/unit/test_predict.py re-fits and compares).
INTENSITY_HALF_POINT = 900.0  # I0, FLOP per byte
INTENSITY_STEEPNESS = 4.0  # k
# Relative half-width of the band around a prediction from a measured reference: the 90th
# percentile of the leave-one-out errors (docs/catalog.md).
BAND_MEASURED_REFERENCE = 0.30
BAND_NO_REFERENCE = 0.5
# MFU gpuscout measured on an H200 with mixed_bfloat16 (docs/benchmarks.md): GPT-2 small 42.7%,
# BERT-base ~35%, ViT-B/16 ~36%; ResNet-50 15.5%. Used only when nothing was measured.
ASSUMED_MFU = {"transformer": 0.35, "convnet": 0.15}
ASSUMED_ON = "h200"


@dataclass(frozen=True)
class Reference:
    gpu_id: str
    throughput: float  # units per second
    label: str  # "measured: run 1a2b (H200)" or "published: <source>"


@dataclass(frozen=True)
class Prediction:
    throughput: float
    low: float
    high: float
    basis: str  # "measured" (on this GPU kind, in the store), "published" (on this GPU kind), or "predicted"
    references: tuple[str, ...]


def alpha(intensity: float, half_point: float = INTENSITY_HALF_POINT, steepness: float = INTENSITY_STEEPNESS) -> float:
    """The compute share of the step time's dependence, between 0 (bandwidth) and 1 (compute)."""
    return intensity**steepness / (intensity**steepness + half_point**steepness)


def peak(gpu: GpuSpec, precision: Precision) -> float | None:
    return gpu.peak_tflops(precision)[0]


def scale(throughput: float, ref: GpuSpec, gpu: GpuSpec, precision: Precision, a: float) -> float | None:
    p_ref, p_gpu = peak(ref, precision), peak(gpu, precision)
    if not p_ref or not p_gpu:
        return None
    return throughput * (p_gpu / p_ref) ** a * (gpu.memory_bandwidth_gbs / ref.memory_bandwidth_gbs) ** (1 - a)


def predict(
    references: list[Reference],
    gpu: GpuSpec,
    precision: Precision,
    intensity: float,
    catalog: Catalog,
    half_point: float = INTENSITY_HALF_POINT,
    steepness: float = INTENSITY_STEEPNESS,
) -> Prediction | None:
    """Measured on this GPU kind: the references' median; else scaled from the others."""
    same = [r for r in references if r.gpu_id == gpu.id]
    measured = [r for r in same if r.label.startswith("measured")]
    same = measured or same  # the user's own measurements before published figures
    if same:
        value = statistics.median(r.throughput for r in same)
        low, high = min(r.throughput for r in same), max(r.throughput for r in same)
        basis = "measured" if any(r.label.startswith("measured") for r in same) else "published"
        return Prediction(value, low, high, basis, tuple(r.label for r in same))
    a = alpha(intensity, half_point, steepness)
    logs, used = [], []
    for r in references:
        scaled = scale(r.throughput, catalog.get(r.gpu_id), gpu, precision, a)
        if scaled:
            logs.append(math.log(scaled))
            used.append(r.label)
    if not logs:
        return None
    value = math.exp(sum(logs) / len(logs))
    band = BAND_NO_REFERENCE if all(u.startswith("assumed") for u in used) else BAND_MEASURED_REFERENCE
    return Prediction(value, value * (1 - band), value * (1 + band), "predicted", tuple(used))


# How an assumed reference's label ends ("35% MFU on the H200 (transformers measured by gpuscout)"),
# with or without its "assumed: " prefix: a figure that stands on another kind of model than the job's
ASSUMED_SUFFIX = "s measured by gpuscout)"


def assumed_reference(kind: str, training_flops_per_unit: float, catalog: Catalog, precision: Precision) -> Reference:
    """A made-up measurement on the H200 at the MFU gpuscout saw there for this kind of model."""
    h200 = catalog.get(ASSUMED_ON)
    peak_flops = (peak(h200, precision) or h200.fp32_tflops) * 1e12
    mfu = ASSUMED_MFU[kind]
    return Reference(
        ASSUMED_ON,
        mfu * peak_flops / training_flops_per_unit,
        f"assumed: {mfu:.0%} MFU on the H200 ({kind}{ASSUMED_SUFFIX}",
    )


# ---------------------------------------------------------------- the published table


@dataclass(frozen=True)
class Published:
    group: str
    precision: str  # half | full
    gpu: str
    throughput: float
    unit: str
    intensity: float
    source: str
    workload: str | None = None

    @property
    def run_precision(self) -> Precision:
        # fp16 and bf16 peaks are equal on every GPU that has both; V100 and T4 have fp16 only
        return Precision.mixed_float16 if self.precision == "half" else Precision.fp32


@lru_cache(maxsize=1)
def published() -> tuple[Published, ...]:
    text = resources.files("gpuscout.catalog").joinpath("published.toml").read_text(encoding="utf-8")
    return tuple(Published(**entry) for entry in tomllib.loads(text)["entry"])


def _predict_entry(
    entry: Published, others: list[Published], catalog: Catalog, half_point: float, steepness: float
) -> float | None:
    refs = [Reference(o.gpu, o.throughput, o.source) for o in others if o.group == entry.group]
    if not refs:
        return None
    result = predict(refs, catalog.get(entry.gpu), entry.run_precision, entry.intensity, catalog, half_point, steepness)
    return result.throughput if result else None


def _errors(entries: list[Published], catalog: Catalog, half_point: float, steepness: float) -> list[float]:
    errors = []
    for i, entry in enumerate(entries):
        predicted = _predict_entry(entry, entries[:i] + entries[i + 1 :], catalog, half_point, steepness)
        if predicted is not None:
            errors.append(abs(predicted / entry.throughput - 1))
    return errors


GRID = [(i0, k) for i0 in (300, 500, 700, 900, 1200, 1500, 2000, 3000) for k in (1, 2, 4, 8)]


def fit(entries: list[Published], catalog: Catalog) -> tuple[float, float]:
    """(I0, k) with the smallest median error of predicting each entry from its group."""
    return min(GRID, key=lambda p: (statistics.median(_errors(entries, catalog, *p) or [math.inf]), p))


def loo_errors(entries: list[Published], catalog: Catalog) -> list[float]:
    """Each entry predicted from the others of its group, the constants fitted without it."""
    errors = []
    for i, entry in enumerate(entries):
        rest = entries[:i] + entries[i + 1 :]
        predicted = _predict_entry(entry, rest, catalog, *fit(rest, catalog))
        if predicted is not None:
            errors.append(abs(predicted / entry.throughput - 1))
    return errors
