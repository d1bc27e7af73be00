"""Ranking the catalog's GPUs for one job: fits, throughput (measured, published or predicted),
time and cost to train, throughput per dollar, and the reasons, under a budget and a deadline."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.analysis import scaling
from gpuscout.catalog import Catalog, GpuSpec, predict
from gpuscout.catalog.pricing import HourlyCost, PricingOptions, hourly_cost
from gpuscout.core.spec import Precision
from gpuscout.recommend.jobs import GB, Job
from gpuscout.recommend.measured import predict_run

# A job fits when its estimate is at most this share of the GPU's memory (the CUDA context,
# library workspaces and fragmentation take the rest; docs/methodology.md, sizing).
FIT_SHARE = 0.9
GPU_COUNTS = (1, 2, 4, 8)
EDGE_TDP_W = 75


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
    one_gpu_hours: float | None = None  # the whole training on one GPU of the kind (a sweep's trial)
    gpu_share: float | None = None  # of a step on one GPU of the kind, the GPU's (from a measured run)

    @property
    def usd_per_hour(self) -> float | None:
        """The price of all `gpus` GPUs an hour (None: no price known)."""
        return None if self.hourly is None else self.hourly.usd_per_hour * self.gpus

    def to_dict(self) -> dict:
        t = self.throughput
        return {
            "gpu": self.gpu.id,
            "name": self.gpu.name,
            "gpus": self.gpus,
            "fits": self.fits,
            "memory_per_gpu_gb": self.memory_per_gpu_bytes / GB,
            "memory_gb": self.gpu.memory_gb,
            "throughput": None
            if t is None
            else {
                "value": t.throughput,
                "low": t.low,
                "high": t.high,
                "basis": t.basis,
                "references": list(t.references),
                "input_cap": getattr(t, "input_cap", None),
            },
            "hours": self.hours,
            "cost_usd": self.cost_usd,
            "usd_per_hour": self.usd_per_hour,
            "price": None if self.hourly is None else self.hourly.model_dump(),
            "units_per_usd": self.units_per_usd,
            "eligible": self.eligible,
            "reasons": self.reasons,
            "one_gpu_hours": self.one_gpu_hours,
            "gpu_share": self.gpu_share,
        }


def _effective_precision(gpu: GpuSpec, precision: Precision) -> tuple[Precision | None, str | None]:
    if precision is Precision.mixed_bfloat16 and gpu.bf16_tflops is None:
        if gpu.fp16_tflops is None:
            return None, "no bf16 or fp16 tensor cores"
        return Precision.mixed_float16, "no bf16 tensor cores: predicted with mixed_float16 (needs loss scaling)"
    return precision, None


def efficiency(job: Job, gpu: GpuSpec, k: int) -> tuple[float, str]:
    """Data-parallel efficiency at k GPUs of `gpu`'s kind: measured by `gpuscout scale` where the
    store has it (job.scaling), else what `scale` expects over its interconnect (analysis/scaling.py)."""
    if k == 1:
        return 1.0, ""
    if (gpu.id, k) in job.scaling:
        return job.scaling[(gpu.id, k)]
    link = "NVLink" if gpu.nvlink_gbs else "PCIe"
    expected = scaling.expected_efficiency(k, link)
    return expected, f"{expected:.0%} data-parallel efficiency assumed over {link}"


def evaluate(
    job: Job,
    gpu: GpuSpec,
    catalog: Catalog,
    constraints: Constraints,
    pricing: PricingOptions,
    reference_gpu: GpuSpec | None,
) -> Row:
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
            reasons.append(
                f"does not fit: needs {need(counts[-1]) / GB:.1f} GB per GPU even on {counts[-1]} "
                f"(has {gpu.memory_gb:g} GB)"
                if job.fixed_bytes <= budget
                else f"does not fit: weights and optimizer state alone need {job.fixed_bytes / GB:.1f} GB "
                "(model parallelism is not modelled)"
            )
            reasons += _smaller_batch(job, budget)
        return Row(gpu, 1, False, need(1), None, None, None, hourly, None, False, reasons)
    total_units = job.dataset_units * constraints.epochs if job.dataset_units else None
    at = _measured_at if job.measured is not None else _predicted_at
    first = at(job, gpu, precision, catalog, 1)
    if first is None:
        reasons.append(_unpredictable(job))
        return Row(gpu, fitting[0], True, need(fitting[0]), None, None, None, hourly, None, False, reasons)

    def hours_at(k: int) -> tuple[predict.Prediction, float | None]:
        p = at(job, gpu, precision, catalog, k)
        return p, (_hours(job, p, total_units, constraints.epochs) if total_units else None)

    k = fitting[0]
    if constraints.deadline_h and total_units:
        meeting = [c for c in fitting if hours_at(c)[1] <= constraints.deadline_h]
        k = meeting[0] if meeting else fitting[-1]
    throughput, hours = hours_at(k)
    if k > 1:
        reasons.append(
            f"needs {k} GPUs "
            + ("to fit" if k == fitting[0] else "to meet the deadline")
            + f" ({efficiency(job, gpu, k)[1]})"
        )
    if job.measured is None:
        reasons.append(
            f"{throughput.basis} ({len(throughput.references)} "
            f"reference{'s' if len(throughput.references) != 1 else ''})"
        )
    else:
        reasons.append(f"{throughput.basis}: {throughput.references[0]}")
    if reference_gpu is not None and throughput.basis == "predicted" and gpu.id != reference_gpu.id:
        reasons.append(_bound(job, gpu, reference_gpu, precision))
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
    one_gpu_hours = hours_at(1)[1] if 1 in fitting else None
    return Row(
        gpu,
        k,
        True,
        need(k),
        throughput,
        hours,
        cost,
        hourly,
        units_per_usd,
        eligible,
        reasons,
        one_gpu_hours=one_gpu_hours,
        gpu_share=getattr(first, "gpu_share", None),
    )


def _predicted_at(job: Job, gpu: GpuSpec, precision: Precision, catalog: Catalog, k: int) -> predict.Prediction | None:
    """k GPUs from the job's references (or the assumed MFU when it has none)."""
    refs = list(job.references) or [
        predict.assumed_reference(job.kind, job.training_flops_per_unit * job.units_per_sample, catalog, job.precision)
    ]
    if job.units_per_sample > 1 and not job.references:  # assumed reference is per sample: per unit
        refs = [predict.Reference(r.gpu_id, r.throughput * job.units_per_sample, r.label) for r in refs]
    single = predict.predict(refs, gpu, precision, job.intensity, catalog)
    if single is None:
        return None
    eff = k * efficiency(job, gpu, k)[0]
    return predict.Prediction(
        single.throughput * eff, single.low * eff, single.high * eff, single.basis, single.references
    )


def _measured_at(job: Job, gpu: GpuSpec, precision: Precision, catalog: Catalog, k: int) -> predict.Prediction | None:
    """k GPUs from the run the job was measured by, its bottleneck split kept (from_run.py)."""
    p = predict_run(job.measured, gpu, precision, job.intensity, catalog, job.kind, k, efficiency(job, gpu, k)[0])
    if p is None:
        return None
    units = job.units_per_sample
    return MeasuredPrediction(
        p.samples_per_s * units,
        p.low * units,
        p.high * units,
        p.basis,
        (p.how,),
        gpu_share=p.gpu_share,
        input_cap=None if p.input_cap is None else p.input_cap * units,
    )


@dataclass(frozen=True)
class MeasuredPrediction(predict.Prediction):
    gpu_share: float = 1.0  # of the predicted step, the GPU's
    input_cap: float | None = None  # units/s the input and host allow with an infinitely fast GPU


def _hours(job: Job, p: predict.Prediction, total_units: float, epochs: float) -> float:
    """Training steps at the predicted speed, plus each epoch's validation as measured, made
    faster by the same factor, its host's part (the callbacks at its end, the time between
    epochs) as measured, and the run's start-up as measured (--from)."""
    seconds = total_units / p.throughput
    m = job.measured
    if m is not None and m.samples_per_s:
        faster = m.samples_per_s * job.units_per_sample / p.throughput
        seconds += epochs * (m.epoch_overhead_s * faster + m.epoch_host_s) + m.startup_s
    return seconds / 3600


def _unpredictable(job: Job) -> str:
    m = job.measured
    if m is None:
        return "no prediction: the GPU lacks the precision's path"
    if m.samples_per_s is None:
        return (
            "cannot predict: no step timing; mark each step with gpuscout.watch.step() "
            "(or train with Model.fit) and watch it again"
        )
    return "cannot predict: measured on the CPU with no FLOP count of the model"


def _smaller_batch(job: Job, budget: float) -> list[str]:
    """The largest batch that fits one GPU, when the job's does not."""
    if job.per_sample_bytes <= 0 or job.fixed_bytes >= budget:
        return []
    largest = int((budget - job.fixed_bytes) // job.per_sample_bytes)
    return (
        [f"batch {largest} fits one ({(job.fixed_bytes + largest * job.per_sample_bytes) / GB:.1f} GB)"]
        if largest >= 1
        else []
    )


def _bound(job: Job, gpu: GpuSpec, reference_gpu: GpuSpec, precision: Precision) -> str:
    if predict.alpha(job.intensity) < 0.5:
        ratio = gpu.memory_bandwidth_gbs / reference_gpu.memory_bandwidth_gbs
        return f"memory-bound workload: bandwidth {ratio:.2g}x the {reference_gpu.name}'s"
    ratio = (predict.peak(gpu, precision) or 0) / (predict.peak(reference_gpu, precision) or 1)
    return f"compute-bound workload: {precision.value} peak {ratio:.2g}x the {reference_gpu.name}'s"


def candidates(catalog: Catalog, scenario: str) -> list[GpuSpec]:
    if scenario == "edge":
        return [g for g in catalog.gpus if g.segment == "edge" or g.tdp_w <= EDGE_TDP_W]
    return list(catalog.gpus)


def rank(job: Job, catalog: Catalog, constraints: Constraints, pricing: PricingOptions) -> list[Row]:
    """Every candidate GPU, the eligible ones first: cheapest to train when the job's size is
    known, else most throughput per dollar, else fastest."""
    measured = [r.gpu_id for r in job.references if r.label.startswith("measured")] or [
        r.gpu_id for r in job.references
    ]
    if job.measured is not None:  # --from RUN: the GPU it ran on (None: a CPU, predicted from FLOPs)
        reference_gpu = job.measured.gpu
    else:
        reference_gpu = catalog.get(measured[0]) if measured else catalog.get(predict.ASSUMED_ON)
    rows = [
        evaluate(job, g, catalog, constraints, pricing, reference_gpu)
        for g in candidates(catalog, constraints.scenario)
    ]

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
