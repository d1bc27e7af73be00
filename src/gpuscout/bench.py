"""`gpuscout bench`: plan validated runs, measure each in a child, build records, store them.

Measuring code never formats: this module returns plain records; ``report/`` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout import backends, datasets, engine, sizing, workloads
from gpuscout.analysis.stats import across_runs
from gpuscout.errors import UsageError
from gpuscout.record.run import RunRecord
from gpuscout.pricing import PricingOptions
from gpuscout.spec import DataMode, Precision, RunSpec, Task, ToAccuracy, build_spec
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import DEFAULT_INTERVAL_S
from gpuscout.workloads import user

DEFAULT_TIMEOUT_S = engine.DEFAULT_TIMEOUT_S


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

    def measure_options(self) -> engine.MeasureOptions:
        return engine.MeasureOptions(timeout_s=self.timeout_s, telemetry=self.telemetry,
                                     telemetry_interval_s=self.telemetry_interval_s, pricing=self.pricing)


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


def label(spec: RunSpec) -> str:
    """How a run is named on the terminal while it runs."""
    seq = f" seq{spec.seq_len}" if spec.seq_len else ""
    if spec.inference:
        return f"{spec.workload} inference {spec.inference.format.value} {spec.inference.variant}{seq}"
    return f"{spec.workload} {spec.backend.value} {spec.precision.value} bs{spec.batch_size}{seq}"


def run_bench(specs: list[RunSpec], options: BenchOptions, store: Store, nvml: Nvml,
              progress: engine.Progress | None = None) -> list[RunRecord]:
    session = engine.Session(nvml, options.measure_options())
    return engine.run([(spec, label(spec)) for spec in specs], session, store, progress, repeats=options.repeats)


def summarize_repeats(records: list[RunRecord]) -> list[dict]:
    """Across independent runs of the same configuration: olympic mean with 5+, else the mean."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        key = (r.workload, r.backend.value, r.precision.value, r.xla, r.batch_size, r.data.value, r.device,
               r.seq_len, r.devices)
        groups.setdefault(key, []).append(r)
    out = []
    for key, runs in groups.items():
        medians = [r.throughput.median for r in runs if r.ok]
        if len(runs) < 2 or not medians:
            continue
        out.append({"workload": key[0], "backend": key[1], "precision": key[2], "xla": key[3],
                    "batch_size": key[4], "data": key[5], "device": key[6], "seq_len": key[7],
                    "run_ids": [r.id for r in runs], "unit": runs[0].unit,
                    "throughput": across_runs(medians)})
    return out
