"""Runs of the standard workloads, or of a user's model, from what was asked: BenchOptions in,
validated RunSpecs out (request.py's common checks, rules.py's rules, the workload's defaults,
the memory check). bench, inference, tune --workload and a sweep's trials plan here; scale plans
its counts in scale/counts.py from the same request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout import workloads
from gpuscout.core import datasets
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import (
    Backend,
    DataMode,
    Distribution,
    RunSpec,
    Task,
    ToAccuracy,
    build_spec,
)
from gpuscout.measure import request, rules
from gpuscout.measure.request import RunRequest
from gpuscout.measure.rules import DeviceChoice
from gpuscout.telemetry.nvml import Nvml
from gpuscout.workloads import sizing, user


@dataclass
class BenchOptions(RunRequest):
    """What `gpuscout bench` was asked, before plan() checks it (the run's common part:
    measure/request.py)."""

    pipeline_cost: int = 1
    repeats: int = 1
    device: DeviceChoice = field(default_factory=DeviceChoice)
    model: str | None = None  # a user's model: file.py[:function] or file.keras (workloads/user.py)
    input_shape: str | None = None  # .keras models with free input dimensions
    flops_per_sample: float | None = None  # forward FLOPs of a user's model, instead of the count
    to_accuracy: float | None = None  # train on real data to this validation accuracy
    dataset: str | None = None
    max_epochs: int = 30


# What a user model's loss trains on, in words (child/user_model.py LABEL_KINDS)
LABELS = {
    "onehot": "one-hot",
    "binary": "0/1",
    "distribution": "probability-vector",
    "positive": "positive",
    "dense": "float (regression)",
}


def plan(
    workload_names: list[str], options: BenchOptions, nvml: Nvml, batch_sizes: dict[str, int] | None = None
) -> tuple[list[RunSpec], str | None]:
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
    rules.at_least("--repeats", options.repeats, 1)
    ready = request.checked(options)
    goal = _accuracy_goal(options)
    ref = user.parse_ref(options.model, options.input_shape) if options.model else None
    if ref is not None and options.batch_size == "auto":
        raise UsageError("--batch-size auto needs a workload's measured memory model; give a user model a number")
    found = [workloads.get(name) for name in workload_names]
    seq_lens = {w.name: rules.seq_len(w, options.seq_len) for w in found}
    backend = ready.backend
    gpu_index, notice = rules.device(options.device, nvml)
    precision = rules.precision(backend, options.precision, nvml, gpu_index)
    memory_total = rules.memory_total(nvml, gpu_index)
    info = None
    if ref is not None:  # last: it starts a child that builds the user's model on the CPU
        info = user.inspect_in_child(ref, backend, precision, options.flops_per_sample, options.measure.timeout_s)
        found = [user.workload_from_info(info)]
    if goal is not None:
        for w in found:
            why = (
                "it reads token sequences"
                if w.is_sequence or w.input_kind == "ids"
                else f"its loss trains on {LABELS.get(w.label_kind, w.label_kind)} targets, "
                "and the datasets give class ids"
                if w.label_kind != "sparse"
                else None
            )
            if why:
                raise UsageError(
                    f"--to-accuracy trains image classifiers on class ids (sparse categorical "
                    f"cross-entropy); {w.name} is not one: {why}"
                )
            datasets.check_fits(goal.dataset, w.input_shape(None), w.name)

    def batch_for(w) -> int:
        if options.batch_size == "auto":
            return sizing.auto_batch_size(w, precision, seq_lens.get(w.name), memory_total)
        if options.batch_size:
            return options.batch_size
        default = (batch_sizes or {}).get(w.name) or w.default_batch_size
        return default if gpu_index is not None else rules.cpu_batch(default)

    common = request.spec_fields(options, ready, precision, Distribution.single, on_gpu=gpu_index is not None)
    specs = [
        build_spec(
            **common,
            workload=w.name,
            batch_size=batch_for(w),
            seq_len=seq_lens.get(w.name),
            pipeline_cost=options.pipeline_cost,
            gpu_index=gpu_index,
            model=ref,
            model_info=info,
            task=Task.to_accuracy if goal else Task.measure,
            to_accuracy=goal,
        )
        for w in found
    ]
    if options.fit_check:
        for spec in specs:
            rules.fits(workloads.for_spec(spec), spec.batch_size, spec.precision, spec.seq_len, memory_total)
    if gpu_index is None:  # defaults per device, said where they differ (the record holds batch and XLA)
        cpu = [f"batch {rules.CPU_DEFAULT_BATCH} at most (Keras fit's default)"] if not options.batch_size else []
        if backend is Backend.tensorflow and options.xla is None:
            cpu.append("XLA off, as Keras' fit on a CPU-only machine (--xla to turn it on)")
        if cpu:
            notice = "; ".join(filter(None, [notice, "CPU defaults: " + ", ".join(cpu)]))
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
    return ToAccuracy(
        target=options.to_accuracy, dataset=datasets.locate(options.dataset), max_epochs=options.max_epochs
    )


def label(spec: RunSpec) -> str:
    """How a run is named on the terminal while it runs."""
    seq = f" seq{spec.seq_len}" if spec.seq_len else ""
    if spec.inference:
        return f"{spec.workload} inference {spec.inference.format.value} {spec.inference.variant}{seq}"
    return f"{spec.workload} {spec.backend.value} {spec.precision.value} bs{spec.batch_size}{seq}"
