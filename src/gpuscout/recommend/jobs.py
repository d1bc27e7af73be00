"""The job `gpuscout recommend` ranks GPUs for: what it computes (FLOPs, intensity), what it keeps
in memory, and the throughputs measured or published for it. One builder per way of naming it:
a registered workload, a GPT-style size (--params), a user's model file, or a stored run
(recommend/from_run.py)."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

from gpuscout import workloads
from gpuscout.analysis import scaling
from gpuscout.catalog import predict
from gpuscout.core import durations
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision
from gpuscout.recommend.measured import MeasuredRun
from gpuscout.record.run import RunRecord
from gpuscout.workloads import sizing

GB = 1e9
# Bytes of training state per parameter under mixed precision with Adam (Keras keeps float32
# variables): weights 4 + gradients 4 + two moments 8 (ZeRO paper, Rajbhandari et al. 2020, sec. 3.1).
STATE_BYTES_PER_PARAM = 16
# GPT-style shapes by size (GPT-2 / GPT-3 papers), used when --params comes without --layers/--hidden.
GPT_SHAPES = (
    (124e6, 12, 768),
    (350e6, 24, 1024),
    (760e6, 24, 1536),
    (1.3e9, 24, 2048),
    (2.7e9, 32, 2560),
    (6.7e9, 32, 4096),
    (13e9, 40, 5120),
    (30e9, 48, 7168),
    (65e9, 80, 8192),
    (175e9, 96, 12288),
)


@dataclass
class Job:
    name: str
    unit: str  # what throughput counts: images, samples, tokens
    units_per_sample: int
    training_flops_per_unit: float
    intensity: float  # training FLOPs per byte of activations (gpuscout.catalog.predict)
    fixed_bytes: float
    per_sample_bytes: float
    memory_basis: str
    batch_size: int
    precision: Precision
    kind: str  # transformer | convnet (for the assumed MFU when nothing was measured)
    dataset_units: float | None  # one epoch, in units
    references: list[predict.Reference] = field(default_factory=list)
    # --from RUN: the run the job was measured by; its bottleneck split drives the prediction
    measured: MeasuredRun | None = None
    # (catalog GPU id, GPU count) -> data-parallel efficiency measured by `gpuscout scale`, and its label
    scaling: dict[tuple[str, int], tuple[float, str]] = field(default_factory=dict)


# A decimal number as people write one: 1, 1.3, .5, 7e9 (never "1.2.3" or ".")
DECIMAL = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


def parse_count(text: str) -> float:
    """'350M', '1.3B', '7e9' -> a number."""
    match = re.fullmatch(rf"\s*({DECIMAL})\s*([kKmMbBtT]?)\s*", text)
    if not match:
        raise UsageError(f"--params must be a number like 350M or 1.3B, got {text[:40]!r}")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"--params must be > 0, got {text!r}")
    if value > MAX_PARAMS:
        raise UsageError(
            f"--params {text} is more than {MAX_PARAMS:.0e} parameters, far past any model trained: "
            "a number like 350M, 1.3B or 70B"
        )
    return value


# A thousand times today's largest trained models (~10^12 parameters): past it nothing is planned
MAX_PARAMS = 1e15


def params_label(params: float) -> str:
    """900e12 -> '900T', 1.3e9 -> '1.3B', 350e6 -> '350M': how --params is written."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= scale:
            return f"{params / scale:.3g}{suffix}"
    return f"{params:.3g}"


# A deadline past ten years plans nothing a GPU is rented for (and a 400-digit one was taken as
# infinite, meaning "no deadline" while the output said one was given)
MAX_DEADLINE_H = 10 * 365 * 24


def parse_duration_h(text: str) -> float:
    """'12h', '90m', '2d', '3600s', '1d12h' (hours without a unit, core/durations.py) -> hours."""
    return durations.seconds(text, "--deadline", bare="h", most_s=MAX_DEADLINE_H * 3600) / 3600


def is_half(precision: Precision) -> bool:
    return precision is not Precision.fp32


def stored_references(
    records: list[RunRecord],
    name: str,
    precision: Precision,
    seq_len: int | None,
    mode: str = "training",
    batch_size: int | None = None,
) -> list[predict.Reference]:
    """Throughputs measured on one GPU of a catalog kind for this job: training runs at its batch
    size (a quarter batch of `bench --suite quick` runs slower), precision (bf16 and fp16 are not
    the same) and sequence length; or (mode="inference") each GPU-run inference format, whose best
    batch for_inference takes."""
    refs = []
    for r in records:
        if (
            r.workload != name
            or not r.ok
            or not r.throughput
            or r.device != "gpu"
            or r.precision != precision
            or r.seq_len != seq_len
            or (batch_size is not None and r.batch_size != batch_size)
            or not (r.gpu and r.gpu.catalog_id)
            or r.time_to_accuracy
            or r.devices != 1
            or r.mode != mode
        ):
            continue
        what = f"{r.inference.format} inference, " if r.inference else ""
        refs.append(
            predict.Reference(
                r.gpu.catalog_id,
                r.throughput.median,
                f"measured: run {r.id} ({r.gpu.name}, {what}batch {r.batch_size})",
            )
        )
    return refs


def measured_scaling(records: list[RunRecord], kind: str | None = None) -> dict[tuple[str, int], tuple[float, str]]:
    """Data-parallel efficiency measured by `gpuscout scale` sessions in the store, by (catalog GPU
    id, GPU count): each session's k-GPU throughput over k times its one-GPU throughput, the median
    over sessions (of models of `kind`, transformer or convnet, when given)."""
    sessions: dict[tuple[str, str], dict[int, RunRecord]] = {}
    for r in records:
        if not (r.ok and r.scale and r.samples_per_s and r.gpu and r.gpu.catalog_id and r.mode == "training"):
            continue
        if kind is not None and workload_kind(r.workload) not in (kind, None):
            continue
        sessions.setdefault((r.scale.session, r.gpu.catalog_id), {})[r.devices] = r
    found: dict[tuple[str, int], list[tuple[float, str]]] = {}
    for (session, gpu), runs in sessions.items():
        if 1 not in runs:
            continue
        for k, r in runs.items():
            if k > 1:
                eff = scaling.efficiency(scaling.speedup(r.samples_per_s, runs[1].samples_per_s), k)
                found.setdefault((gpu, k), []).append((eff, f"{r.workload}, session {session}"))
    return {
        key: (
            statistics.median(e for e, _ in values),
            f"{statistics.median(e for e, _ in values):.0%} data-parallel efficiency measured by gpuscout scale "
            f"({'; '.join(label for _, label in values[:3])}{', …' if len(values) > 3 else ''})",
        )
        for key, values in found.items()
    }


def workload_kind(name: str) -> str | None:
    """transformer | convnet for a registered workload (the assumed MFU and measured scaling
    follow it); None for a name the registry does not hold."""
    try:
        w = workloads.get(name)
    except UsageError:
        return None
    return "transformer" if w.is_sequence or w.name.startswith("vit") else "convnet"


def job_for_workload(
    name: str,
    precision: Precision,
    batch_size: int | None,
    seq_len: int | None,
    records: list[RunRecord],
    dataset_units: float | None,
) -> Job:
    w = workloads.get(name)
    seq = (seq_len or w.default_seq_len) if w.is_sequence else None
    batch = batch_size or w.default_batch_size
    units = w.units_per_sample(seq)
    fixed = sizing.estimate_bytes(w, 0, precision, seq)
    per_sample = sizing.estimate_bytes(w, 1, precision, seq) - fixed
    half_per_sample = sizing.estimate_bytes(w, 1, Precision.mixed_bfloat16, seq) - sizing.estimate_bytes(
        w, 0, Precision.mixed_bfloat16, seq
    )
    refs = stored_references(records, name, precision, seq, batch_size=batch)
    half = "half" if is_half(precision) else "full"
    refs += [
        predict.Reference(p.gpu, p.throughput, f"published: {p.source}")
        for p in predict.published()
        if p.workload == name and p.precision == half
    ]
    return Job(
        name=name,
        unit=w.unit,
        units_per_sample=units,
        training_flops_per_unit=w.training_flops_per_sample(seq) / units,
        intensity=w.training_flops_per_sample(seq) / half_per_sample,
        fixed_bytes=fixed,
        per_sample_bytes=per_sample,
        memory_basis="gpuscout's memory model, fitted from allocator peaks measured on an H200",
        batch_size=batch,
        precision=precision,
        kind=workload_kind(name),
        dataset_units=dataset_units if dataset_units is not None else w.reference_dataset_size,
        references=refs,
    )


def gpt_shape(params: float, layers: int | None, hidden: int | None) -> tuple[int, int]:
    if layers and hidden:
        return layers, hidden
    _, l_guess, h_guess = min(GPT_SHAPES, key=lambda s: abs(math.log(s[0] / params)))
    if hidden and not layers:
        return max(1, round(params / (12 * hidden * hidden))), hidden
    if layers and not hidden:
        return layers, int(math.sqrt(params / (12 * layers)) // 64 * 64 or 64)
    return l_guess, h_guess


def job_for_params(
    params: float,
    seq_len: int,
    layers: int | None,
    hidden: int | None,
    vocab: int,
    batch_size: int,
    precision: Precision,
    dataset_tokens: float | None,
) -> Job:
    """A GPT-style decoder of `params` parameters: FLOPs 6N + 12.L.d.T per token (PaLM appendix),
    training state 16 bytes per parameter, activations 34.d.T.L bytes per sequence in half
    precision with fused attention (Korthikanti et al. 2022, eq. 2 without the 5.a.T^2 term that
    flash attention removes) plus the logits in float32 (4 bytes x T x vocab, kept for the loss
    and its gradient: x2)."""
    layers, hidden = gpt_shape(params, layers, hidden)
    act = 34 * hidden * seq_len * layers + 2 * 4 * seq_len * vocab
    if not is_half(precision):
        act *= 2
    flops_per_token = 6 * params + 12 * layers * hidden * seq_len
    return Job(
        name=f"decoder {params_label(params)} ({layers} layers x {hidden}, seq {seq_len})",
        unit="tokens",
        units_per_sample=seq_len,
        training_flops_per_unit=flops_per_token,
        intensity=flops_per_token * seq_len / (act / (1 if is_half(precision) else 2)),
        fixed_bytes=STATE_BYTES_PER_PARAM * params,
        per_sample_bytes=act,
        memory_basis="estimated: 16 B/parameter of training state + 34.d.T.L activation bytes per sequence "
        "(Korthikanti et al. 2022) + float32 logits",
        batch_size=batch_size,
        precision=precision,
        kind="transformer",
        dataset_units=dataset_tokens,
    )


def job_for_model(
    info, precision: Precision, batch_size: int | None, records: list[RunRecord], dataset_units: float | None
) -> Job:
    """A user's model (inspected): its parameters give the training state; activations are not
    known until it is measured, so memory is a lower bound."""
    flops = 3 * info.forward_flops
    return Job(
        name=info.name,
        unit="samples",
        units_per_sample=1,
        training_flops_per_unit=flops,
        intensity=predict.INTENSITY_HALF_POINT,
        fixed_bytes=STATE_BYTES_PER_PARAM * info.params,
        per_sample_bytes=0.0,
        memory_basis="estimated: 16 B/parameter of training state only (activations unknown until "
        "`gpuscout bench --model` measures them): a lower bound",
        batch_size=batch_size or info.default_batch_size,
        precision=precision,
        kind="transformer",
        dataset_units=dataset_units,
        references=stored_references(
            records, info.name, precision, None, batch_size=batch_size or info.default_batch_size
        ),
    )


def for_inference(job: Job, measured: list[predict.Reference] | None = None) -> Job:
    """Forward passes only: a third of the FLOPs, weights in the compute precision, no optimizer
    state, activations freed layer by layer (taken as a third of training's). Throughput: the
    `bench --mode inference` runs stored for it (`measured`, best batch per GPU kind) when there
    are any, else training's references x3."""
    bytes_per_param = 2 if is_half(job.precision) else 4
    params = job.fixed_bytes / STATE_BYTES_PER_PARAM
    if measured:
        best: dict[str, predict.Reference] = {}
        for ref in measured:
            if ref.gpu_id not in best or ref.throughput > best[ref.gpu_id].throughput:
                best[ref.gpu_id] = ref
        references = list(best.values())
    else:
        references = [
            predict.Reference(r.gpu_id, 3 * r.throughput, r.label + " x3 (forward only)") for r in job.references
        ]
    return Job(
        **{
            **job.__dict__,
            "name": f"{job.name} (inference)",
            "training_flops_per_unit": job.training_flops_per_unit / 3,
            "fixed_bytes": params * bytes_per_param,
            "per_sample_bytes": job.per_sample_bytes / 3,
            "memory_basis": job.memory_basis + "; inference: weights only, a third of the activations",
            "references": references,
        }
    )
