"""`gpuscout recommend`: rank the catalog's GPUs for one training (or serving) job.

For each GPU: does the job fit (weights, gradients, optimizer state and activations per GPU,
from gpuscout's measured memory model where one exists, else estimated, with its basis); its
throughput (measured on that GPU kind in the user's store, else predicted by gpuscout.core.predict
from the measurements and published figures it has); the time and cost to train; throughput per
dollar; and one line of reasons. docs/catalog.md has the equations.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gpuscout import workloads

from gpuscout.core import predict, sizing
from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.core.errors import UsageError
from gpuscout.core.pricing import HourlyCost, PricingOptions, hourly_cost
from gpuscout.record.run import RunRecord
from gpuscout.core.spec import Precision

GB = 1e9
# A job fits when its estimate is at most this share of the GPU's memory (the CUDA context,
# library workspaces and fragmentation take the rest; docs/methodology.md, sizing).
FIT_SHARE = 0.9
# Data-parallel efficiency assumed for K > 1 GPUs: the common rule of thumb (>= 90% at 2 GPUs
# with NVLink); PCIe-only GPUs lose more to the all-reduce. `gpuscout scale` measures it.
PARALLEL_EFFICIENCY = {"nvlink": 0.95, "pcie": 0.85}
GPU_COUNTS = (1, 2, 4, 8)
# Bytes of training state per parameter under mixed precision with Adam (Keras keeps float32
# variables): weights 4 + gradients 4 + two moments 8 (ZeRO paper, Rajbhandari et al. 2020, sec. 3.1).
STATE_BYTES_PER_PARAM = 16
# GPT-style shapes by size (GPT-2 / GPT-3 papers), used when --params comes without --layers/--hidden.
GPT_SHAPES = ((124e6, 12, 768), (350e6, 24, 1024), (760e6, 24, 1536), (1.3e9, 24, 2048), (2.7e9, 32, 2560),
              (6.7e9, 32, 4096), (13e9, 40, 5120), (30e9, 48, 7168), (65e9, 80, 8192), (175e9, 96, 12288))
EDGE_TDP_W = 75


@dataclass
class Job:
    name: str
    unit: str  # what throughput counts: images, samples, tokens
    units_per_sample: int
    training_flops_per_unit: float
    intensity: float  # training FLOPs per byte of activations (gpuscout.core.predict)
    fixed_bytes: float
    per_sample_bytes: float
    memory_basis: str
    batch_size: int
    precision: Precision
    kind: str  # transformer | convnet (for the assumed MFU when nothing was measured)
    dataset_units: float | None  # one epoch, in units
    references: list[predict.Reference] = field(default_factory=list)


@dataclass
class Constraints:
    scenario: str = "train"
    budget_usd_per_hour: float | None = None
    budget_usd_total: float | None = None
    deadline_h: float | None = None
    epochs: float = 1.0
    max_gpus: int = 8


@dataclass
class Row:
    gpu: GpuSpec
    gpus: int
    fits: bool
    memory_per_gpu_bytes: float
    throughput: predict.Prediction | None  # for all `gpus` together
    hours: float | None
    cost_usd: float | None
    hourly: HourlyCost | None
    units_per_usd: float | None
    eligible: bool
    reasons: list[str]

    def to_dict(self) -> dict:
        t = self.throughput
        return {"gpu": self.gpu.id, "name": self.gpu.name, "gpus": self.gpus, "fits": self.fits,
                "memory_per_gpu_gb": self.memory_per_gpu_bytes / GB, "memory_gb": self.gpu.memory_gb,
                "throughput": None if t is None else {"value": t.throughput, "low": t.low, "high": t.high,
                                                       "basis": t.basis, "references": list(t.references)},
                "hours": self.hours, "cost_usd": self.cost_usd,
                "usd_per_hour": None if self.hourly is None else self.hourly.usd_per_hour * self.gpus,
                "price": None if self.hourly is None else self.hourly.model_dump(),
                "units_per_usd": self.units_per_usd, "eligible": self.eligible, "reasons": self.reasons}


# ---------------------------------------------------------------- jobs

def parse_count(text: str) -> float:
    """'350M', '1.3B', '7e9' -> a number."""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([kKmMbBtT]?)\s*", text)
    if not match:
        raise UsageError(f"--params must be a number like 350M or 1.3B, got {text!r}")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"--params must be > 0, got {text!r}")
    return value


def params_label(params: float) -> str:
    """900e12 -> '900T', 1.3e9 -> '1.3B', 350e6 -> '350M': how --params is written."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= scale:
            return f"{params / scale:.3g}{suffix}"
    return f"{params:.3g}"


def parse_duration_h(text: str) -> float:
    match = re.fullmatch(r"\s*([0-9.]+)\s*([smhd]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"--deadline must be a positive duration like 12h, 90m or 2d, got {text!r}")
    return float(match.group(1)) * {"s": 1 / 3600, "m": 1 / 60, "h": 1, "": 1, "d": 24}[match.group(2)]


def _half(precision: Precision) -> bool:
    return precision is not Precision.fp32


def stored_references(records: list[RunRecord], name: str, precision: Precision, seq_len: int | None,
                      mode: str = "training", batch_size: int | None = None) -> list[predict.Reference]:
    """Throughputs measured on one GPU of a catalog kind for this job: training runs at its batch
    size (a quarter batch of `bench --suite quick` runs slower), precision (bf16 and fp16 are not
    the same) and sequence length; or (mode="inference") each GPU-run inference format, whose best
    batch for_inference takes."""
    refs = []
    for r in records:
        if (r.workload != name or not r.ok or not r.throughput or r.device != "gpu"
                or r.precision != precision or r.seq_len != seq_len
                or (batch_size is not None and r.batch_size != batch_size)
                or not (r.gpu and r.gpu.catalog_id) or r.time_to_accuracy
                or r.devices != 1 or r.mode != mode):
            continue
        what = f"{r.inference.format} inference, " if r.inference else ""
        refs.append(predict.Reference(r.gpu.catalog_id, r.throughput.median,
                                      f"measured: run {r.id} ({r.gpu.name}, {what}batch {r.batch_size})"))
    return refs


def job_for_workload(name: str, precision: Precision, batch_size: int | None, seq_len: int | None,
                     records: list[RunRecord], dataset_units: float | None) -> Job:
    w = workloads.get(name)
    seq = (seq_len or w.default_seq_len) if w.is_sequence else None
    batch = batch_size or w.default_batch_size
    units = w.units_per_sample(seq)
    fixed = sizing.estimate_bytes(w, 0, precision, seq)
    per_sample = sizing.estimate_bytes(w, 1, precision, seq) - fixed
    half_per_sample = sizing.estimate_bytes(w, 1, Precision.mixed_bfloat16, seq) - sizing.estimate_bytes(
        w, 0, Precision.mixed_bfloat16, seq)
    refs = stored_references(records, name, precision, seq, batch_size=batch)
    half = "half" if _half(precision) else "full"
    refs += [predict.Reference(p.gpu, p.throughput, f"published: {p.source}") for p in predict.published()
             if p.workload == name and p.precision == half]
    return Job(
        name=name, unit=w.unit, units_per_sample=units,
        training_flops_per_unit=w.training_flops_per_sample(seq) / units,
        intensity=w.training_flops_per_sample(seq) / half_per_sample,
        fixed_bytes=fixed, per_sample_bytes=per_sample,
        memory_basis="gpuscout's memory model, fitted from allocator peaks measured on an H200",
        batch_size=batch, precision=precision, kind="transformer" if w.is_sequence or name.startswith("vit") else "convnet",
        dataset_units=dataset_units if dataset_units is not None else w.reference_dataset_size,
        references=refs)


def gpt_shape(params: float, layers: int | None, hidden: int | None) -> tuple[int, int]:
    if layers and hidden:
        return layers, hidden
    _, l_guess, h_guess = min(GPT_SHAPES, key=lambda s: abs(math.log(s[0] / params)))
    if hidden and not layers:
        return max(1, round(params / (12 * hidden * hidden))), hidden
    if layers and not hidden:
        return layers, int(math.sqrt(params / (12 * layers)) // 64 * 64 or 64)
    return l_guess, h_guess


def job_for_params(params: float, seq_len: int, layers: int | None, hidden: int | None, vocab: int,
                   batch_size: int, precision: Precision, dataset_tokens: float | None) -> Job:
    """A GPT-style decoder of `params` parameters: FLOPs 6N + 12.L.d.T per token (PaLM appendix),
    training state 16 bytes per parameter, activations 34.d.T.L bytes per sequence in half
    precision with fused attention (Korthikanti et al. 2022, eq. 2 without the 5.a.T^2 term that
    flash attention removes) plus the logits in float32 (4 bytes x T x vocab, kept for the loss
    and its gradient: x2)."""
    layers, hidden = gpt_shape(params, layers, hidden)
    act = 34 * hidden * seq_len * layers + 2 * 4 * seq_len * vocab
    if not _half(precision):
        act *= 2
    flops_per_token = 6 * params + 12 * layers * hidden * seq_len
    return Job(
        name=f"decoder {params_label(params)} ({layers} layers x {hidden}, seq {seq_len})", unit="tokens",
        units_per_sample=seq_len, training_flops_per_unit=flops_per_token,
        intensity=flops_per_token * seq_len / (act / (1 if _half(precision) else 2)),
        fixed_bytes=STATE_BYTES_PER_PARAM * params, per_sample_bytes=act,
        memory_basis="estimated: 16 B/parameter of training state + 34.d.T.L activation bytes per sequence "
                     "(Korthikanti et al. 2022) + float32 logits",
        batch_size=batch_size, precision=precision, kind="transformer", dataset_units=dataset_tokens)


def job_for_model(info, precision: Precision, batch_size: int | None, records: list[RunRecord],
                  dataset_units: float | None) -> Job:
    """A user's model (inspected): its parameters give the training state; activations are not
    known until it is measured, so memory is a lower bound."""
    flops = 3 * info.forward_flops
    return Job(
        name=info.name, unit="samples", units_per_sample=1, training_flops_per_unit=flops,
        intensity=predict.INTENSITY_HALF_POINT, fixed_bytes=STATE_BYTES_PER_PARAM * info.params, per_sample_bytes=0.0,
        memory_basis="estimated: 16 B/parameter of training state only (activations unknown until "
                     "`gpuscout bench --model` measures them): a lower bound",
        batch_size=batch_size or info.default_batch_size, precision=precision, kind="transformer",
        dataset_units=dataset_units, references=stored_references(records, info.name, precision, None,
                                                                  batch_size=batch_size or info.default_batch_size))


def for_inference(job: Job, measured: list[predict.Reference] | None = None) -> Job:
    """Forward passes only: a third of the FLOPs, weights in the compute precision, no optimizer
    state, activations freed layer by layer (taken as a third of training's). Throughput: the
    `bench --mode inference` runs stored for it (`measured`, best batch per GPU kind) when there
    are any, else training's references x3."""
    bytes_per_param = 2 if _half(job.precision) else 4
    params = job.fixed_bytes / STATE_BYTES_PER_PARAM
    if measured:
        best: dict[str, predict.Reference] = {}
        for ref in measured:
            if ref.gpu_id not in best or ref.throughput > best[ref.gpu_id].throughput:
                best[ref.gpu_id] = ref
        references = list(best.values())
    else:
        references = [predict.Reference(r.gpu_id, 3 * r.throughput, r.label + " x3 (forward only)")
                      for r in job.references]
    return Job(**{**job.__dict__, "name": f"{job.name} (inference)",
                  "training_flops_per_unit": job.training_flops_per_unit / 3,
                  "fixed_bytes": params * bytes_per_param, "per_sample_bytes": job.per_sample_bytes / 3,
                  "memory_basis": job.memory_basis + "; inference: weights only, a third of the activations",
                  "references": references})


# ---------------------------------------------------------------- ranking

def _effective_precision(gpu: GpuSpec, precision: Precision) -> tuple[Precision | None, str | None]:
    if precision is Precision.mixed_bfloat16 and gpu.bf16_tflops is None:
        if gpu.fp16_tflops is None:
            return None, "no bf16 or fp16 tensor cores"
        return Precision.mixed_float16, "no bf16 tensor cores: predicted with mixed_float16 (needs loss scaling)"
    return precision, None


def evaluate(job: Job, gpu: GpuSpec, catalog: Catalog, constraints: Constraints, pricing: PricingOptions,
             reference_gpu: GpuSpec | None) -> Row:
    reasons: list[str] = []
    precision, note = _effective_precision(gpu, job.precision)
    if note:
        reasons.append(note)
    counts = [k for k in GPU_COUNTS if k <= constraints.max_gpus]
    budget = FIT_SHARE * gpu.memory_bytes

    def need(k: int) -> float:
        return job.fixed_bytes + job.per_sample_bytes * math.ceil(job.batch_size / k)

    fitting = [k for k in counts if need(k) <= budget]
    hourly = hourly_cost(catalog, gpu.id, pricing, strict=False)
    if precision is None or not fitting:
        if precision is not None:
            reasons.append(f"does not fit: needs {need(counts[-1]) / GB:.1f} GB per GPU even on {counts[-1]} "
                           f"(has {gpu.memory_gb:g} GB)" if job.fixed_bytes <= budget else
                           f"does not fit: weights and optimizer state alone need {job.fixed_bytes / GB:.1f} GB "
                           "(model parallelism is not modelled)")
        return Row(gpu, 1, False, need(1), None, None, None, hourly, None, False, reasons)
    refs = list(job.references) or [predict.assumed_reference(job.kind, job.training_flops_per_unit * job.units_per_sample,
                                                              catalog, job.precision)]
    if job.units_per_sample > 1 and not job.references:  # assumed reference is per sample: per unit
        refs = [predict.Reference(r.gpu_id, r.throughput * job.units_per_sample, r.label) for r in refs]
    single = predict.predict(refs, gpu, precision, job.intensity, catalog)
    if single is None:
        reasons.append("no prediction: the GPU lacks the precision's path")
        return Row(gpu, fitting[0], True, need(fitting[0]), None, None, None, hourly, None, False, reasons)
    link = "nvlink" if gpu.nvlink_gbs else "pcie"
    total_units = job.dataset_units * constraints.epochs if job.dataset_units else None

    def at(k: int) -> tuple[predict.Prediction, float | None]:
        eff = 1.0 if k == 1 else PARALLEL_EFFICIENCY[link]
        p = predict.Prediction(single.throughput * k * eff, single.low * k * eff, single.high * k * eff,
                               single.basis, single.references)
        return p, (total_units / p.throughput / 3600 if total_units else None)

    k = fitting[0]
    if constraints.deadline_h and total_units:
        meeting = [c for c in fitting if at(c)[1] <= constraints.deadline_h]
        k = meeting[0] if meeting else fitting[-1]
    throughput, hours = at(k)
    if k > 1:
        reasons.append(f"needs {k} GPUs " + ("to fit" if k == fitting[0] else "to meet the deadline")
                       + f" ({PARALLEL_EFFICIENCY[link]:.0%} data-parallel efficiency assumed over {link.upper()})")
    reasons.append(f"{single.basis} ({len(single.references)} reference{'s' if len(single.references) != 1 else ''})")
    if reference_gpu is not None and single.basis == "predicted" and gpu.id != reference_gpu.id:
        a = predict.alpha(job.intensity)
        bound = "memory-bound" if a < 0.5 else "compute-bound"
        if a < 0.5:
            ratio = gpu.memory_bandwidth_gbs / reference_gpu.memory_bandwidth_gbs
            reasons.append(f"{bound} workload: bandwidth {ratio:.2g}x the {reference_gpu.name}'s")
        else:
            ratio = (predict.peak(gpu, precision) or 0) / (predict.peak(reference_gpu, precision) or 1)
            reasons.append(f"{bound} workload: {precision.value} peak {ratio:.2g}x the {reference_gpu.name}'s")
    cost = units_per_usd = None
    eligible = True
    if hourly is None:
        reasons.append("no price known: give --price or add one with --catalog")
    else:
        per_hour = hourly.usd_per_hour * k
        units_per_usd = throughput.throughput * 3600 / per_hour
        if hours is not None:
            cost = per_hour * hours
        if hourly.stale:
            reasons.append(f"price stale ({hourly.date})")
        if constraints.budget_usd_per_hour is not None and per_hour > constraints.budget_usd_per_hour:
            eligible = False
            reasons.append(f"over the budget: {per_hour:.2f} USD/h")
        if constraints.budget_usd_total is not None and cost is not None and cost > constraints.budget_usd_total:
            eligible = False
            reasons.append(f"over the budget: {cost:,.0f} USD in all")
    if constraints.deadline_h and hours is not None and hours > constraints.deadline_h:
        eligible = False
        reasons.append(f"misses the deadline: {hours:.1f} h on {k} GPU(s)")
    if (constraints.budget_usd_per_hour is not None or constraints.budget_usd_total is not None) and hourly is None:
        eligible = False
    return Row(gpu, k, True, need(k), throughput, hours, cost, hourly, units_per_usd, eligible, reasons)


def candidates(catalog: Catalog, scenario: str) -> list[GpuSpec]:
    if scenario == "edge":
        return [g for g in catalog.gpus if g.segment == "edge" or g.tdp_w <= EDGE_TDP_W]
    return list(catalog.gpus)


def rank(job: Job, catalog: Catalog, constraints: Constraints, pricing: PricingOptions) -> list[Row]:
    """Every candidate GPU, the eligible ones first: cheapest to train when the job's size is
    known, else most throughput per dollar, else fastest."""
    measured = [r.gpu_id for r in job.references if r.label.startswith("measured")] or [r.gpu_id for r in job.references]
    reference_gpu = catalog.get(measured[0]) if measured else catalog.get(predict.ASSUMED_ON)
    rows = [evaluate(job, g, catalog, constraints, pricing, reference_gpu) for g in candidates(catalog, constraints.scenario)]

    def key(row: Row):
        speed = row.throughput.throughput if row.throughput else 0.0
        if row.cost_usd is not None:
            money = row.cost_usd
        elif row.units_per_usd is not None:
            money = -row.units_per_usd
        else:
            money = math.inf
        return (not row.eligible, not row.fits, money, -speed)

    return sorted(rows, key=key)
