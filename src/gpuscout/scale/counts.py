"""What a `scale` session runs: its options, the counts and devices, and one spec per count."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout import workloads
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import BatchNormStats, Distribution, RunSpec, build_spec
from gpuscout.measure import engine, request, rules
from gpuscout.measure.request import RunRequest
from gpuscout.telemetry.nvml import Nvml

MODES = ("weak", "strong")
# A collective that hangs (a NCCL deadlock, a lost peer) never returns: each count's run is
# killed after this long. Compilation plus the protocol takes 1-3 minutes for the suite's
# models on an H200 (docs/benchmarks.md), so 15 minutes is a hang, not a slow run.
DEFAULT_TIMEOUT_S = 900.0


@dataclass
class ScaleOptions(RunRequest):
    """What `gpuscout scale` was asked (the run's common part: measure/request.py). Its batch_size:
    weak scaling's per-GPU batch, strong scaling's global one; None: the workload's default."""

    counts: tuple[int, ...] = (1, 2)
    mode: str = "weak"
    gpu_ids: tuple[int, ...] | None = None  # which GPUs; counts take the first N. None: 0, 1, ...
    cpu: bool = False
    local_workers: bool = False  # each count N as N MultiWorkerMirroredStrategy processes
    measure: engine.MeasureOptions = field(default_factory=lambda: engine.MeasureOptions(timeout_s=DEFAULT_TIMEOUT_S))
    batchnorm: BatchNormStats = BatchNormStats.per_replica
    # Measure each GPU of the largest count alone too, and judge each count against the slowest
    # of its GPUs alone (analysis/scaling.against_each_alone); CPU devices share one CPU: never
    each_alone: bool = True


@dataclass
class Plan:
    workload: str
    specs: list[RunSpec]  # one per count (with local workers: worker 0's; cluster.py makes the others)
    counts: list[int]
    mode: str
    device_kind: str
    gpu_ids: list[int]
    notices: list[str]
    alone: list[tuple[int, RunSpec]] = field(default_factory=list)  # (GPU, its one-GPU run) past the first


def plan(workload_name: str, options: ScaleOptions, nvml: Nvml) -> Plan:
    """Validate everything before any run (exit 2 on bad input, nothing run)."""
    workload = workloads.get(workload_name)
    if options.mode not in MODES:
        raise UsageError(f"unknown --mode {options.mode!r}: choose weak or strong")
    if isinstance(options.batch_size, str):
        raise UsageError("scale's --batch-size is a number (weak: per GPU, strong: global)")
    ready = request.checked(options)
    notices = []
    counts = sorted(set(options.counts) | {1})
    if 1 not in options.counts:
        notices.append("added the 1-device run: speedup and efficiency are measured against it")
    backend = ready.backend
    if options.local_workers and backend.value != "tensorflow":
        raise UsageError(
            "--local-workers runs MultiWorkerMirroredStrategy, a tensorflow strategy: add "
            "--backend tensorflow (the jax backend scales over one host's GPUs with DataParallel)"
        )
    device_kind, gpu_ids = _devices(options, counts, nvml, notices)
    precision = rules.precision(backend, options.precision, nvml, gpu_ids[0] if gpu_ids else None)
    seq_len = rules.seq_len(workload, options.seq_len)
    base_batch = options.batch_size or workload.default_batch_size
    if options.mode == "strong":
        uneven = [n for n in counts if base_batch % n]
        if uneven:
            raise UsageError(
                f"strong scaling splits the global batch {base_batch} over the GPUs: it does not "
                f"divide by {', '.join(map(str, uneven))}; pick a --batch-size divisible by every count"
            )
    distribution = Distribution.multi_worker if options.local_workers else Distribution.mirrored
    common = request.spec_fields(options, ready, precision, distribution, on_gpu=device_kind == "gpu")
    specs = []
    for n in counts:
        per_device = base_batch if options.mode == "weak" else base_batch // n
        if options.fit_check and device_kind == "gpu":
            rules.fits(workload, per_device, precision, seq_len, rules.memory_total(nvml, gpu_ids[0]), " per GPU")
        devices = 1 if options.local_workers else n  # local workers: n processes of one device each
        ids = tuple(gpu_ids[:devices]) if device_kind == "gpu" else None
        specs.append(
            build_spec(
                **common,
                workload=workload.name,
                batch_size=per_device * devices,
                seq_len=seq_len,
                gpu_index=ids[0] if ids else None,
                gpu_indices=ids,
                devices=devices,
                distribution=distribution,
                batchnorm=options.batchnorm if n > 1 else None,
            )
        )
    alone = (
        [(g, specs[0].model_copy(update={"gpu_index": g, "gpu_indices": (g,)})) for g in gpu_ids[1 : counts[-1]]]
        if options.each_alone and device_kind == "gpu"
        else []
    )
    return Plan(workload.name, specs, counts, options.mode, device_kind, gpu_ids, notices, alone)


def _devices(options: ScaleOptions, counts: list[int], nvml: Nvml, notices: list[str]) -> tuple[str, list[int]]:
    """("gpu" and the GPUs to use, the first N for a count N) or ("cpu", []) for logical CPU devices."""
    if options.cpu or not nvml.available or nvml.count == 0:
        if options.gpu_ids:
            raise UsageError(
                "--gpus names GPUs; this run is on the CPU"
                if options.cpu
                else f"--gpus given, but NVML found no GPU ({nvml.error or 'none'}): run `gpuscout doctor`"
            )
        if not options.cpu:  # a run over CPU devices is asked for, never fallen into
            raise UsageError(
                f"no NVIDIA GPU found ({nvml.error or 'NVML reports none'}): `gpuscout doctor` says why; "
                "add --cpu to scale over logical CPU devices instead (they share this CPU's cores: a "
                "check of the code path, not of scaling)"
            )
        if counts[-1] > 8:
            raise UsageError(f"--gpu-counts {counts[-1]} on the CPU: at most 8 logical CPU devices")
        return "cpu", []
    gpu_ids = rules.gpu_indices(list(options.gpu_ids if options.gpu_ids is not None else range(nvml.count)), nvml)
    if counts[-1] > len(gpu_ids):
        raise UsageError(
            f"--gpu-counts {counts[-1]} asks for more GPUs than "
            + (
                f"--gpus lists ({len(gpu_ids)})"
                if options.gpu_ids is not None
                else f"this machine has ({nvml.count} visible)"
            )
            + f": use counts up to {len(gpu_ids)}"
        )
    return "gpu", gpu_ids
