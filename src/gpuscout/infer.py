"""`gpuscout bench --mode inference`: plan inference runs (one child per workload, format and
LiteRT variant, every batch size in it), and turn the child's result into one record per batch
size, stored like every run (compare and report read them; `mode` is "inference").

Measuring is in measure/inference.py and measure/formats.py (the child); this module validates,
runs, and builds records.
"""

from __future__ import annotations

import importlib.util
import uuid
from dataclasses import dataclass

from gpuscout import bench as bench_lib
from gpuscout import datasets, workloads
from gpuscout.analysis.latency import best_batch, summarize_latency
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout import catalog
from gpuscout.errors import UsageError, parse_positive_ints
from gpuscout.executor.local import ChildOutcome
from gpuscout.spec import LITERT_VARIANTS, Inference, RunSpec, ServeFormat, Task
from gpuscout.telemetry.nvml import Nvml

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
    ServeFormat.saved_model: (("tensorflow",), "pip install 'gpuscout[tensorflow]' (Keras exports SavedModels "
                              "through TensorFlow, also from the jax backend)"),
    ServeFormat.litert: (("tensorflow",), "pip install 'gpuscout[tensorflow]' (the LiteRT converter is TensorFlow's; "
                         "'gpuscout[litert]' adds the ai-edge-litert interpreter)"),
    ServeFormat.onnx: (("onnx", "onnxruntime", "tf2onnx"), "pip install 'gpuscout[onnx]' (onnx, tf2onnx, onnxruntime)"),
    ServeFormat.tensorrt: (("onnx", "onnxruntime", "tf2onnx"), "pip install 'gpuscout[onnx]' and an onnxruntime-gpu "
                           "built with TensorRT, on an NVIDIA GPU"),
}


def check_format(name: str) -> ServeFormat:
    try:
        fmt = ServeFormat(name)
    except ValueError:
        raise UsageError(f"unknown --format {name!r}: choose {', '.join(f.value for f in ServeFormat)}") from None
    needs, hint = _NEEDS.get(fmt, ((), ""))
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--format {fmt.value} is not available here ({', '.join(missing)} not installed): {hint}")
    if fmt is ServeFormat.tensorrt:
        import onnxruntime

        if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():
            raise UsageError("--format tensorrt: this ONNX Runtime has no TensorRT execution provider (it has "
                             f"{', '.join(onnxruntime.get_available_providers())}): {hint}")
    return fmt


def plan(workload_names: list[str], options: bench_lib.BenchOptions, infer: InferOptions, nvml: Nvml,
         dataset: str | None) -> tuple[list[RunSpec], str | None]:
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
    base_options = bench_lib.BenchOptions(**{**options.__dict__, "batch_size": max(infer.batch_sizes),
                                             "to_accuracy": None, "dataset": None})
    base_specs, notice = bench_lib.plan(workload_names, base_options, nvml)
    located = datasets.locate(dataset) if dataset else None
    specs = []
    for base in base_specs:
        workload = workloads.for_spec(base)
        if located is not None:
            if workload.is_sequence or workload.input_kind == "ids" or workload.label_kind != "sparse":
                raise UsageError(f"--dataset measures the accuracy of image classifiers; {workload.name} is not one")
            datasets.check_fits(located, workload.input_shape(None), workload.name)
        for fmt in formats:
            if fmt in (ServeFormat.saved_model, ServeFormat.litert, ServeFormat.onnx, ServeFormat.tensorrt) \
                    and base.precision.value != "fp32":
                raise UsageError(f"--format {fmt.value} exports the fp32 model; reduced precision is the LiteRT "
                                 "variants' job (--litert-variants) or --format keras with --precision")
            variants = infer.litert_variants if fmt is ServeFormat.litert else (base.precision.value,)
            for variant in variants:
                specs.append(base.model_copy(update={
                    "task": Task.infer, "batch_size": max(infer.batch_sizes),
                    "gpu_index": None if fmt is ServeFormat.litert else base.gpu_index,
                    "inference": Inference(batch_sizes=infer.batch_sizes, format=fmt, variant=variant,
                                           requests=infer.requests, warmup_requests=infer.warmup_requests,
                                           concurrency=infer.concurrency, load_seconds=infer.load_seconds,
                                           dataset=located)}))
    return specs, notice


def records_from(spec: RunSpec, outcome: ChildOutcome, gpus, host: dict, env: dict, group_id: str,
                 samples, interval_s: float, others: list[int], pricing) -> list[dict]:
    """One record per batch size (or one failure record) from an inference child's outcome."""
    if outcome.status != "ok":
        record = bench_lib.build_record(spec, outcome, gpus, host, env, group_id, 0, samples, interval_s, others, pricing)
        _mark(record, spec, None)
        return [record]
    result = outcome.result
    forward = workloads.for_spec(spec).forward_flops(spec.seq_len)
    records = []
    for point in result["points"]:
        one = spec.model_copy(update={"batch_size": point["batch_size"]})
        child = {**result, "compile_s": point["first_request_s"], "warmup_s": None,
                 "steps_per_window": point["windows"][0]["steps"], "windows": point["windows"], "loss": None,
                 "fixed_step_loss": None, "fixed_steps": None}
        ok = ChildOutcome("ok", child, None, outcome.stderr_tail, outcome.returncode, outcome.duration_s)
        record = bench_lib.build_record(one, ok, gpus, host, env, group_id, 0, samples, interval_s, others, pricing)
        _mark(record, one, result)
        record["latency"] = summarize_latency(point["latencies_s"])
        record["input_path"] = point.get("input_path")  # how the input was copied to the GPU, and the timings
        record["training_flops_per_sample"] = None
        record["inference_flops_per_sample"] = forward
        if record["samples_per_s"]:
            achieved = achieved_tflops(forward, record["samples_per_s"])
            entry = catalog.match(gpus[0].name) if gpus and result["server"]["device"] == "gpu" else None
            utilisation, peak, path = mfu(achieved, entry, spec.precision)
            record.update({"achieved_tflops": achieved, "mfu": utilisation, "mfu_peak_tflops": peak, "mfu_peak_path": path})
        if result["load"] and point["batch_size"] == result["load"]["batch_size"]:
            load = result["load"]
            record["load_test"] = {k: load[k] for k in ("clients", "batch_size", "seconds", "requests",
                                                        "samples_per_s", "thread_safe")}
            record["load_test"]["latency"] = summarize_latency(load["latencies_s"])
        records.append(record)
    return records


def _mark(record: dict, spec: RunSpec, result: dict | None) -> None:
    inf = spec.inference
    record.update({"mode": "inference", "format": inf.format.value, "variant": inf.variant,
                   "epoch_time_s": None, "load_test": None, "latency": None, "input_path": None,
                   "serving": (result or {}).get("server"), "agreement": (result or {}).get("agreement"),
                   "trained_on": (result or {}).get("trained") or None})
    if record.get("device") == "gpu" and (result or {}).get("server", {}).get("device") == "cpu":
        record["device"] = "cpu"  # LiteRT runs on the CPU, whatever GPU the host has


def run(specs: list[RunSpec], options: bench_lib.BenchOptions, store, nvml: Nvml,
        progress: bench_lib.Progress | None = None) -> list[dict]:
    progress = progress or bench_lib.Progress()
    group_id = uuid.uuid4().hex[:8]
    host = bench_lib.host_provenance(nvml)
    records = []
    for number, spec in enumerate(specs, 1):
        progress.run_started(spec, number, len(specs))
        made = bench_lib.measure_one(spec, options, nvml, host, group_id, 0,
                                     on_event=lambda e, s=spec: progress.event(s, e), build=records_from)
        for record in made:
            store.put(record)
            progress.run_finished(record)
        records.extend(made)
    return records


def target_verdicts(records: list[dict], target_ms: float) -> list[dict]:
    """Per workload, format and variant: the batch size meeting the p99 target with the highest
    throughput, or the lowest p99 reached when none does."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["status"] == "ok" and r.get("latency"):
            groups.setdefault((r["workload"], r["format"], r["variant"]), []).append(r)
    out = []
    for (workload, fmt, variant), runs in groups.items():
        points = [{"batch_size": r["batch_size"], "samples_per_s": r["samples_per_s"], "latency": r["latency"],
                   "run_id": r["id"]} for r in runs]
        best, fastest = best_batch(points, target_ms)
        out.append({"workload": workload, "format": fmt, "variant": variant, "target_ms": target_ms,
                    "best": best, "lowest_p99": fastest})
    return out
