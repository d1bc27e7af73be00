"""`gpuscout bench`: plan validated runs, measure each in a child, build records, store them.

Measuring code never formats: this module returns plain records; ``report/`` renders them.
"""

from __future__ import annotations

import uuid
from statistics import median
from dataclasses import dataclass, field, replace
from typing import Callable

from gpuscout import METHODOLOGY_VERSION, __version__
from gpuscout import backends, catalog, datasets, sizing, workloads
from gpuscout.analysis import flags as flagging
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout.analysis.stats import across_runs, import_scipy_in_background, summarize
from gpuscout.analysis.telemetry import combine_telemetry, summarize_telemetry
from gpuscout.errors import UsageError
from gpuscout.pricing import PricingOptions, cost_figures, hourly_cost
from gpuscout.executor.local import ChildOutcome, child_env, run_child
from gpuscout.provenance import host_provenance, relevant_env, utc_now
from gpuscout.spec import DataMode, Distribution, Precision, RunSpec, Task, ToAccuracy, build_spec
from gpuscout.store import SCHEMA_VERSION, Store
from gpuscout.telemetry.nvml import GpuInfo, Nvml
from gpuscout.telemetry.sampler import DEFAULT_INTERVAL_S, Sampler
from gpuscout.workloads import user

DEFAULT_TIMEOUT_S = 1800.0


@dataclass
class BenchOptions:
    backend: str = "auto"
    precision: str = "fp32"
    xla: bool = True
    batch_size: int | str | None = None  # None: the workload's default; "auto": sizing.auto_batch_size
    seq_len: int | None = None  # token workloads; None: the workload's default
    data: str = "synthetic"
    warmup_steps: int = 10
    windows: int = 5
    window_steps: int = 10
    window_seconds: float = 2.0
    pipeline_cost: int = 1
    repeats: int = 1
    gpu: int | None = None
    cpu: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    telemetry: bool = True
    telemetry_interval_s: float = DEFAULT_INTERVAL_S
    seed: int = 0
    model: str | None = None  # a user's model: file.py[:function] or file.keras (workloads/user.py)
    input_shape: str | None = None  # .keras models with free input dimensions
    flops_per_sample: float | None = None  # forward FLOPs of a user's model, instead of the count
    to_accuracy: float | None = None  # train on real data to this validation accuracy
    dataset: str | None = None
    max_epochs: int = 30
    pricing: PricingOptions = field(default_factory=PricingOptions)
    fit_check: bool = True  # refuse runs whose memory estimate is clearly over (gpuscout/sizing.py)


def choose_device(options: BenchOptions, nvml: Nvml) -> tuple[int | None, str | None]:
    """(GPU index or None for the CPU, a notice to show once or None)."""
    if options.cpu and options.gpu is not None:
        raise UsageError("--gpu and --cpu exclude each other: pick one")
    if options.cpu:
        return None, None
    if options.gpu is not None:
        if not nvml.available:
            raise UsageError(f"--gpu {options.gpu} asked for, but NVML found no GPU ({nvml.error}); "
                             "use --cpu, or run `gpuscout doctor`")
        if options.gpu >= nvml.count:
            raise UsageError(f"GPU index {options.gpu} not found: this machine has {nvml.count} "
                             f"GPU(s), indices 0..{nvml.count - 1}")
        return options.gpu, None
    if nvml.available and nvml.count > 0:
        return 0, None
    reason = nvml.error or "NVML reports no GPU"
    return None, f"no NVIDIA GPU found ({reason}): running on the CPU; telemetry is off"


def plan(workload_names: list[str], options: BenchOptions, nvml: Nvml,
         batch_sizes: dict[str, int] | None = None) -> tuple[list[RunSpec], str | None]:
    """Validate everything before any work: returns the runs (one per workload) and a notice.

    Batch size: --batch-size (a number, or "auto": scaled to the GPU's memory), else
    `batch_sizes` (a suite's), else the workload's default. A GPU run whose memory estimate is
    clearly over the GPU's memory is refused here, before anything runs."""
    if options.model and workload_names:
        raise UsageError("name workloads or a --model, not both")
    if not workload_names and not options.model:
        raise UsageError(f"name at least one workload or a --model: {', '.join(workloads.names())}")
    if options.flops_per_sample is not None and (not options.model or options.flops_per_sample <= 0):
        raise UsageError("--flops-per-sample is a positive number for a --model")
    if options.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {options.repeats}")
    if options.timeout_s <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {options.timeout_s:g}")
    if isinstance(options.batch_size, int) and options.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {options.batch_size}")
    try:
        data = DataMode(options.data)
    except ValueError:
        raise UsageError(f"unknown --data {options.data!r}: choose synthetic, pipeline or naive") from None
    options.pricing.check()
    goal = _accuracy_goal(options)
    ref = user.parse_ref(options.model, options.input_shape) if options.model else None
    if ref is not None and options.batch_size == "auto":
        raise UsageError("--batch-size auto needs a workload's measured memory model; give a user model a number")
    found = [workloads.get(name) for name in workload_names]
    if options.seq_len is not None:
        fixed = [w.name for w in found if not w.is_sequence]
        if fixed:
            raise UsageError(f"--seq-len applies to token workloads only, not {', '.join(fixed)}")
        for w in found:
            if not 1 <= options.seq_len <= w.max_seq_len:
                raise UsageError(f"--seq-len {options.seq_len} is outside 1..{w.max_seq_len} for {w.name}")
    backend = backends.resolve(options.backend)
    precision = backends.check_precision(backend, options.precision)
    gpu_index, notice = choose_device(options, nvml)
    if gpu_index is not None and precision is Precision.mixed_bfloat16:
        cc = nvml.gpu(gpu_index).compute_capability
        if cc is not None and float(cc) < 8.0:
            raise UsageError(f"GPU {gpu_index} (compute capability {cc}) has no bfloat16 tensor "
                             "cores: use --precision mixed_float16")
    memory_total = nvml.gpu(gpu_index).memory_total_bytes if gpu_index is not None else None
    info = None
    if ref is not None:  # last: it starts a child that builds the user's model on the CPU
        info = user.inspect_in_child(ref, backend, precision, options.flops_per_sample)
        info = info.model_copy(update={"name": user.display_name(ref)})
        found = [user.workload_from_info(info)]
    if goal is not None:
        for w in found:
            if w.is_sequence or w.input_kind == "ids" or w.label_kind != "sparse":
                raise UsageError(f"--to-accuracy trains image classifiers; {w.name} is not one")
            datasets.check_fits(goal.dataset, w.input_shape(None), w.name)

    def batch_for(w) -> int:
        seq = (options.seq_len or w.default_seq_len) if w.is_sequence else None
        if options.batch_size == "auto":
            return sizing.auto_batch_size(w, precision, seq, memory_total)
        return options.batch_size or (batch_sizes or {}).get(w.name) or w.default_batch_size

    specs = [
        build_spec(
            workload=w.name, backend=backend, precision=precision, xla=options.xla,
            batch_size=batch_for(w), data=data,
            seq_len=(options.seq_len or w.default_seq_len) if w.is_sequence else None,
            warmup_steps=options.warmup_steps, windows=options.windows,
            window_steps=options.window_steps, window_seconds=options.window_seconds,
            pipeline_cost=options.pipeline_cost, seed=options.seed, gpu_index=gpu_index,
            model=ref, model_info=info,
            task=Task.to_accuracy if goal else Task.measure, to_accuracy=goal,
        )
        for w in found
    ]
    if options.fit_check:
        too_big = [reason for spec in specs if (reason := sizing.clearly_too_big(
            workloads.for_spec(spec), spec.batch_size, spec.precision, spec.seq_len, memory_total))]
        if too_big:
            raise UsageError("; ".join(too_big) + " (estimate: docs/methodology.md; --no-fit-check runs it anyway)")
    return specs, notice


def _accuracy_goal(options: BenchOptions) -> ToAccuracy | None:
    if options.to_accuracy is None:
        if options.dataset is not None:
            raise UsageError("--dataset is for --to-accuracy runs: add --to-accuracy TARGET (e.g. 0.9)")
        return None
    if not 0 < options.to_accuracy <= 1:
        raise UsageError(f"--to-accuracy is a validation accuracy in (0, 1], got {options.to_accuracy:g}")
    if options.dataset is None:
        raise UsageError(f"--to-accuracy needs real data: --dataset {' | '.join(datasets.NAMES)} | FILE.npz | DIR")
    if options.max_epochs < 1:
        raise UsageError(f"--max-epochs must be >= 1, got {options.max_epochs}")
    if options.data != DataMode.synthetic.value:
        raise UsageError("--to-accuracy reads its --dataset; drop --data")
    return ToAccuracy(target=options.to_accuracy, dataset=datasets.locate(options.dataset),
                      max_epochs=options.max_epochs)


class Progress:
    """What the runner tells a display; the default displays nothing."""

    def run_started(self, spec: RunSpec, number: int, total: int) -> None: ...
    def event(self, spec: RunSpec, event: dict) -> None: ...
    def run_finished(self, record: dict) -> None: ...


def run_bench(specs: list[RunSpec], options: BenchOptions, store: Store, nvml: Nvml,
              progress: Progress | None = None) -> list[dict]:
    progress = progress or Progress()
    group_id = uuid.uuid4().hex[:8]
    host = host_provenance(nvml)
    total = len(specs) * options.repeats
    records = []
    for repeat in range(options.repeats):
        for spec in specs:
            progress.run_started(spec, len(records) + 1, total)
            record = measure_one(spec, options, nvml, host, group_id, repeat,
                                 on_event=lambda e, s=spec: progress.event(s, e))
            store.put(record)
            records.append(record)
            progress.run_finished(record)
    return records


def measure_one(spec: RunSpec, options: BenchOptions, nvml: Nvml, host: dict, group_id: str,
                repeat: int, on_event: Callable[[dict], None] = lambda e: None,
                env: dict[str, str] | None = None, cancel=None, build=None):
    """One run in a child, with telemetry sampled for each of its GPUs; the record.
    `env`: the child's environment when the caller sets more than child_env() does (TF_CONFIG).
    `build`: makes the records instead of build_record (infer.records_from: one per batch size)."""
    gpus = [nvml.gpu(i) for i in spec.gpus] if nvml.available else []
    env = env if env is not None else child_env(spec)
    samplers = ([Sampler(nvml, gpu.index, options.telemetry_interval_s).start() for gpu in gpus]
                if options.telemetry else [])
    during: dict[int, list[dict]] = {}
    child_pid: list[int] = []

    def watch(event: dict) -> None:
        # One process-list call mid-run (never in the sampling loop): who else is on the GPU now.
        if event.get("event") == "warmed_up":
            for gpu in gpus:
                during[gpu.index] = nvml.compute_processes(gpu.index)
        on_event(event)

    import_scipy_in_background()  # summarize() needs it once the child ends
    try:
        outcome = run_child(spec, timeout_s=options.timeout_s, on_event=watch, env=env,
                            on_start=child_pid.append, cancel=cancel)
    finally:
        samples = [sampler.stop() for sampler in samplers]
    others = sorted({pid for gpu in gpus for pid in _others(gpu, during.get(gpu.index, []),
                                                              nvml.compute_processes(gpu.index), child_pid)})
    if build is not None:
        return build(spec, outcome, gpus, host, env, group_id, samples, options.telemetry_interval_s, others,
                     options.pricing)
    return build_record(spec, outcome, gpus, host, env, group_id, repeat, samples,
                        options.telemetry_interval_s, others, options.pricing)


def _others(gpu: GpuInfo | None, during: list[dict], after: list[dict], child_pid: list[int]) -> list[int]:
    """Pids of other compute processes seen before, during or after the run."""
    if gpu is None:
        return []
    ours = set(child_pid)
    others = {p["pid"] for p in gpu.compute_processes + after} - ours
    seen = {p["pid"] for p in during}
    if seen & ours:
        others |= seen - ours
    elif len(seen) > 1:
        # In a container NVML can report host pids, so our child's pid may not appear: one
        # process during the run is ours, more mean someone else is on the GPU too.
        others |= seen
    return sorted(others)


def build_record(spec: RunSpec, outcome: ChildOutcome, gpus: list[GpuInfo], host: dict,
                 env: dict, group_id: str, repeat: int, samples: list[list], interval_s: float,
                 other_pids: list[int], pricing: PricingOptions = PricingOptions()) -> dict:
    """`gpus`: the run's GPUs (empty on the CPU); `samples`: telemetry of each, in that order."""
    workload = workloads.for_spec(spec)
    gpu = gpus[0] if gpus else None
    entry = catalog.match(gpu.name) if gpu else None
    result = outcome.result
    record = {
        "id": uuid.uuid4().hex[:12],
        "created_utc": utc_now(),
        "group_id": group_id,
        "repeat_index": repeat,
        "workload": spec.workload,
        "backend": spec.backend.value,
        "precision": spec.precision.value,
        "xla": spec.xla,
        "batch_size": spec.batch_size,
        "devices": spec.devices,  # GPUs (or logical CPU devices) the batch was split over
        "per_device_batch_size": spec.per_device_batch_size,
        "distribution": None if spec.distribution is Distribution.single else {"kind": spec.distribution.value},
        "seq_len": spec.seq_len,
        "data": spec.data.value,
        "device": spec.device_kind,
        "status": outcome.status,
        "error": None if outcome.status == "ok" else {
            "message": outcome.message, "stderr_tail": outcome.stderr_tail,
            "returncode": outcome.returncode},
        "duration_s": outcome.duration_s,
        "unit": f"{workload.unit}/s",
        "throughput": None, "samples_per_s": None, "step_time_s": None, "epoch_time_s": None, "compile_s": None,
        "warmup_s": None, "steps_per_window": None, "windows": [], "loss": None,
        "fixed_step_loss": None, "fixed_steps": None,
        "input_wait_share": None, "peak_memory_bytes": None, "host_peak_rss_bytes": None,
        "nvml_peak_memory_bytes": None,
        "training_flops_per_sample": workload.training_flops_per_sample(spec.seq_len),
        "estimated_peak_memory_bytes": sizing.estimate_bytes(workload, spec.per_device_batch_size, spec.precision,
                                                             spec.seq_len),  # per device: what must fit on each
        "achieved_tflops": None, "mfu": None, "mfu_peak_tflops": None, "mfu_peak_path": None,
        "telemetry": None,
        "telemetry_per_gpu": None,
        "time_to_accuracy": None,
        "cost": None,
        "flags": [],
        "gpu": None if gpu is None else {**gpu.to_dict(), "catalog_id": entry.id if entry else None},
        "gpus": [g.to_dict() for g in gpus] if len(gpus) > 1 else None,
        "spec": spec.model_dump(mode="json"),
        "env": {**host, "child_env": relevant_env(env), "framework": None, "compiled": None},
        "gpuscout_version": __version__,
        "methodology_version": METHODOLOGY_VERSION,
        "schema_version": SCHEMA_VERSION,
    }
    flags: list[flagging.Flag] = []
    shared = flagging.shared_flag(other_pids)
    if shared:
        flags.append(shared)
    if result is not None:
        _add_measurements(record, result, spec, workload, entry, flags)
        if result.get("time_to_accuracy"):
            record["time_to_accuracy"] = result["time_to_accuracy"]
            curve = result["time_to_accuracy"]["curve"]
            # an epoch of the real dataset, without the first (it holds the compilation)
            record["epoch_time_s"] = median(p["train_s"] for p in (curve[1:] or curve))
            if not result["time_to_accuracy"]["reached"]:
                record["status"] = "not_reached"
                record["error"] = {"message": f"validation accuracy {result['time_to_accuracy']['best_val_accuracy']:.4f} "
                                   f"after {result['time_to_accuracy']['epochs']} epochs, target {spec.to_accuracy.target}",
                                   "stderr_tail": "", "returncode": 0}
        if any(samples):
            measured = sum(w["samples"] for w in result["windows"])
            per_gpu = [{"index": g.index, **summarize_telemetry(s, result["windows"], measured, interval_s)}
                       for g, s in zip(gpus, samples)]
            telemetry = per_gpu[0] if len(per_gpu) == 1 else combine_telemetry(per_gpu)
            record["telemetry"] = telemetry
            if len(per_gpu) > 1:
                record["telemetry_per_gpu"] = per_gpu
                straggler = flagging.straggler_flag(per_gpu)
                if straggler:
                    flags.append(straggler)
            record["nvml_peak_memory_bytes"] = telemetry["memory_used_max_bytes"]
            throttled = flagging.throttle_flag(telemetry["slowdown_reasons"],
                                               telemetry["sm_clock_mean_mhz"], gpu.sm_clock_max_mhz)
            if throttled:
                flags.append(throttled)
    if entry is not None and record["throughput"] is not None:
        add_cost(record, entry, workload, pricing)
    record["flags"] = [f.to_dict() for f in flags]
    return record


def _add_measurements(record: dict, result: dict, spec: RunSpec, workload, entry, flags: list) -> None:
    windows = result["windows"]
    units = workload.units_per_sample(spec.seq_len)  # tokens per sequence, or 1
    for w in windows:
        w["seconds"] = w["end_monotonic_s"] - w["start_monotonic_s"]
        w["throughput"] = w["samples"] * units / w["seconds"]
    throughputs = [w["throughput"] for w in windows]
    summary = summarize(throughputs)
    samples_per_s = summary.median / units
    achieved = achieved_tflops(record["training_flops_per_sample"], samples_per_s)
    utilisation, peak, path = mfu(achieved, entry, spec.precision)
    if peak is not None and spec.device_kind == "gpu" and spec.devices > 1:  # the peak of all the run's GPUs
        utilisation, peak = utilisation / spec.devices, peak * spec.devices
    measured_s = sum(w["seconds"] for w in windows)
    wait_share = (sum(w["input_wait_s"] for w in windows) / measured_s
                  if spec.data is not DataMode.synthetic else None)
    record.update({
        "throughput": {**summary.to_dict(), "unit": record["unit"]},
        "samples_per_s": samples_per_s,
        "step_time_s": spec.batch_size / samples_per_s,
        "epoch_time_s": (workload.reference_dataset_size / summary.median
                         if workload.reference_dataset_size else None),
        "compile_s": result["compile_s"],
        "warmup_s": result["warmup_s"],
        "steps_per_window": result["steps_per_window"],
        "windows": windows,
        "loss": result["loss"],
        "fixed_step_loss": result.get("fixed_step_loss"), "fixed_steps": result.get("fixed_steps"),
        "input_wait_share": wait_share,
        "peak_memory_bytes": result["peak_memory_bytes"],
        "host_peak_rss_bytes": result["host_peak_rss_bytes"],
        "achieved_tflops": achieved,
        "mfu": utilisation, "mfu_peak_tflops": peak, "mfu_peak_path": path,
    })
    record["env"]["framework"] = result["framework"]
    record["env"]["compiled"] = result["compiled"]
    if record["distribution"] is not None:
        record["distribution"].update(result.get("distribution") or {})
    flags.extend(flagging.variance_flags(throughputs, summary.cv))
    for extra in (flagging.input_flag(wait_share), flagging.loss_flag(result["loss"])):
        if extra:
            flags.append(extra)


def add_cost(record: dict, entry, workload, pricing: PricingOptions) -> None:
    """Cost figures at the GPU's hourly cost (docs/catalog.md); none when no price is known."""
    power = (record.get("telemetry") or {}).get("power_mean_w")
    devices = record["devices"] if record["device"] == "gpu" else 1
    per_gpu_power = power / devices if power is not None else None
    hourly = hourly_cost(catalog.load(), entry.id, pricing, per_gpu_power)
    if hourly is None:
        return
    if devices > 1:  # prices are per GPU-hour; the run holds all of its GPUs
        hourly = replace(hourly, usd_per_hour=hourly.usd_per_hour * devices,
                         basis=f"{devices} GPUs x ({hourly.basis})")
    tta = record.get("time_to_accuracy") or {}
    record["cost"] = cost_figures(hourly, record["throughput"]["median"], workload.unit, record["epoch_time_s"],
                                  tta.get("seconds"), power)


def summarize_repeats(records: list[dict]) -> list[dict]:
    """Across independent runs of the same configuration: olympic mean with 5+, else the mean."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r["workload"], r["backend"], r["precision"], r["xla"], r["batch_size"], r["data"], r["device"],
               r.get("seq_len"), r.get("devices") or 1)
        groups.setdefault(key, []).append(r)
    out = []
    for key, runs in groups.items():
        medians = [r["throughput"]["median"] for r in runs if r["status"] == "ok"]
        if len(runs) < 2 or not medians:
            continue
        out.append({"workload": key[0], "backend": key[1], "precision": key[2], "xla": key[3],
                    "batch_size": key[4], "data": key[5], "device": key[6], "seq_len": key[7],
                    "run_ids": [r["id"] for r in runs], "unit": runs[0]["unit"],
                    "throughput": across_runs(medians)})
    return out
