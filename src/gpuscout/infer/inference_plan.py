"""Inference runs planned (a child per workload, format and LiteRT variant, every batch size in
it), run, and judged against a latency target."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import NamedTuple

from gpuscout import workloads
from gpuscout.analysis.latency import best_batch
from gpuscout.core import datasets
from gpuscout.core.errors import UsageError, parse_positive_ints
from gpuscout.core.spec import LITERT_VARIANTS, Inference, RunSpec, ServeFormat, Task
from gpuscout.measure import engine, plans
from gpuscout.record.run import RunRecord
from gpuscout.telemetry.nvml import Nvml


class InferenceResult(NamedTuple):
    """What `bench --mode inference` measured: a record per batch size, and the latency
    target's verdict for each workload and format (target_verdicts)."""

    records: list[RunRecord]
    verdicts: list[dict]


DEFAULT_BATCH_SIZES = (1, 8, 32, 128)


@dataclass
class InferOptions:
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    formats: tuple[str, ...] = ("keras",)
    litert_variants: tuple[str, ...] = LITERT_VARIANTS
    requests: int = 200
    warmup_requests: int = 20
    concurrency: int = 0
    load_seconds: float = 5.0
    latency_target_ms: float | None = None


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    return parse_positive_ints(text, "--batch-sizes", "batch sizes", "1,8,32,128")


# What each format needs installed, beyond the backend, and the extra that brings it.
_NEEDS = {
    ServeFormat.saved_model: (
        ("tensorflow",),
        "pip install 'gpuscout[tensorflow]' (Keras exports SavedModels through TensorFlow, also from the jax backend)",
    ),
    ServeFormat.litert: (
        ("tensorflow",),
        "pip install 'gpuscout[tensorflow]' (the LiteRT converter is TensorFlow's; "
        "'gpuscout[litert]' adds the ai-edge-litert interpreter)",
    ),
    ServeFormat.onnx: (("onnx", "onnxruntime", "tf2onnx"), "pip install 'gpuscout[onnx]' (onnx, tf2onnx, onnxruntime)"),
    ServeFormat.tensorrt: (
        ("onnx", "onnxruntime", "tf2onnx"),
        "pip install 'gpuscout[onnx]' and an onnxruntime-gpu built with TensorRT, on an NVIDIA GPU",
    ),
}


def check_format(name: str) -> ServeFormat:
    try:
        fmt = ServeFormat(name)
    except ValueError:
        raise UsageError(f"unknown --model-format {name!r}: choose {', '.join(f.value for f in ServeFormat)}") from None
    needs, hint = _NEEDS.get(fmt, ((), ""))
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"--model-format {fmt.value} is not available here ({', '.join(missing)} not installed): {hint}"
        )
    if fmt is ServeFormat.tensorrt:
        import onnxruntime

        if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():
            raise UsageError(
                "--model-format tensorrt: this ONNX Runtime has no TensorRT execution provider (it has "
                f"{', '.join(onnxruntime.get_available_providers())}): {hint}"
            )
    return fmt


# As core/spec.Inference bounds it: a load test of more than an hour is a soak, not a measurement
MAX_LOAD_S = 3600.0


def plan(
    workload_names: list[str], options: plans.BenchOptions, infer: InferOptions, nvml: Nvml, dataset: str | None
) -> tuple[list[RunSpec], str | None]:
    """Inference specs, validated before anything runs (bench.plan checks the workload, backend,
    precision and device; the fit check uses the largest batch)."""
    formats = [check_format(f) for f in infer.formats]
    bad = [v for v in infer.litert_variants if v not in LITERT_VARIANTS]
    if bad:
        raise UsageError(f"unknown LiteRT variant {bad[0]!r}: choose {', '.join(LITERT_VARIANTS)}")
    if infer.latency_target_ms is not None and infer.latency_target_ms <= 0:
        raise UsageError(f"--latency-target-ms must be > 0, got {infer.latency_target_ms:g}")
    if infer.concurrency < 0 or infer.requests < 5 or infer.warmup_requests < 1:
        raise UsageError("--concurrency must be >= 0, --requests >= 5 and --warmup-requests >= 1")
    if not 0 < infer.load_seconds <= MAX_LOAD_S:
        raise UsageError(f"--load-seconds must be > 0 and at most {MAX_LOAD_S:g} (an hour), got {infer.load_seconds:g}")
    base_options = replace(options, batch_size=max(infer.batch_sizes), to_accuracy=None, dataset=None)
    base_specs, notice = plans.plan(workload_names, base_options, nvml)
    located = datasets.locate(dataset) if dataset else None
    specs = []
    for base in base_specs:
        workload = workloads.for_spec(base)
        if located is not None:
            if workload.is_sequence or workload.input_kind == "ids" or workload.label_kind != "sparse":
                raise UsageError(f"--dataset measures the accuracy of image classifiers; {workload.name} is not one")
            datasets.check_fits(located, workload.input_shape(None), workload.name)
        for fmt in formats:
            if (
                fmt in (ServeFormat.saved_model, ServeFormat.litert, ServeFormat.onnx, ServeFormat.tensorrt)
                and base.precision.value != "fp32"
            ):
                raise UsageError(
                    f"--model-format {fmt.value} exports the fp32 model; reduced precision is the LiteRT "
                    "variants' job (--litert-variants) or --model-format keras with --precision"
                )
            variants = infer.litert_variants if fmt is ServeFormat.litert else (base.precision.value,)
            for variant in variants:
                specs.append(
                    base.model_copy(
                        update={
                            "task": Task.infer,
                            "batch_size": max(infer.batch_sizes),
                            "gpu_index": None if fmt is ServeFormat.litert else base.gpu_index,
                            "inference": Inference(
                                batch_sizes=infer.batch_sizes,
                                format=fmt,
                                variant=variant,
                                requests=infer.requests,
                                warmup_requests=infer.warmup_requests,
                                concurrency=infer.concurrency,
                                load_seconds=infer.load_seconds,
                                dataset=located,
                            ),
                        }
                    )
                )
    return specs, notice


def run(
    specs: list[RunSpec], options: plans.BenchOptions, store, nvml: Nvml, progress: engine.Progress | None = None
) -> list[RunRecord]:
    """A child per format variant; its records (one per batch size) are derived and stored."""
    session = engine.Session(nvml, options.measure)
    return engine.run([(spec, plans.label(spec)) for spec in specs], session, store, progress)


def target_verdicts(records: list[RunRecord], target_ms: float) -> list[dict]:
    """Per workload, format and variant: the batch size meeting the p99 target with the highest
    throughput, or the lowest p99 reached when none does."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        if r.ok and r.inference and r.inference.latency:
            groups.setdefault((r.workload, r.inference.format, r.inference.variant), []).append(r)
    out = []
    for (workload, fmt, variant), runs in groups.items():
        points = [
            {
                "batch_size": r.batch_size,
                "samples_per_s": r.samples_per_s,
                "latency": r.inference.latency.model_dump(),
                "run_id": r.id,
            }
            for r in runs
        ]
        best, fastest = best_batch(points, target_ms)
        out.append(
            {
                "workload": workload,
                "format": fmt,
                "variant": variant,
                "target_ms": target_ms,
                "best": best,
                "lowest_p99": fastest,
            }
        )
    return out
