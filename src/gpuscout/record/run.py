"""The stored record of one benchmark run: `RunRecord` and its parts.

Every figure in it is derived from a ChildResult by gpuscout.analysis.derive, once, whichever
verb asked for the run (bench, tune, scale, a sweep trial, inference, a multi-worker merge); the
store writes and reads records through this model, so a record that does not validate never
enters the store and is reported, not crashed on, when read. Units are in field names (`_s`
seconds, `_bytes`, `_w` watts, `_mhz`, `_pct` percent 0-100, `_share` a fraction 0-1, `_usd`);
throughputs are in the record's `unit` (images/s, samples/s, tokens/s) and `units_per_sample`
converts them to samples. `gpuscout results schema` prints the JSON Schema of this model.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gpuscout.core.spec import Backend, DataMode, Precision, RunSpec
from gpuscout.core.versions import SCHEMA_VERSION  # noqa: F401  (the record's version, kept with the package's own)
from gpuscout.record.child import (
    Agreement,
    ChildWindow,
    CompilationCacheUse,
    DistributionDetails,
    FrameworkInfo,
    InputPath,
    Part,
    Server,
    TimeToAccuracy,
    TrainedOn,
)

Status = Literal["ok", "oom", "failed", "timeout", "not_reached"]


# A rate, a time, an amount: never below zero (an imported record with a negative throughput was
# ranked by `recommend` as negative samples per dollar).
Amount = Annotated[float, Field(ge=0)]


class Throughput(Part):
    """Statistics of the windows' throughputs, in `unit` (analysis/stats.py)."""

    n: int = Field(ge=1)
    median: Amount
    mean: Amount
    min: Amount
    max: Amount
    iqr: Amount
    cv: Amount | None  # sample standard deviation / mean; None for one window
    ci95_low: Amount | None  # bootstrap 95% interval of the median; None for one window
    ci95_high: Amount | None
    unit: str


class Window(ChildWindow):
    """A timing window with its length and throughput (in the record's unit)."""

    seconds: float = Field(gt=0)
    throughput: Amount


class TelemetrySample(Part):
    """One NVML reading, stamped with time.monotonic()."""

    t_monotonic_s: float
    gpu_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    temperature_c: float | None = None
    clock_event_reasons: int | None = None  # nvmlClocksEventReason bits


class Telemetry(Part):
    """NVML telemetry over the timing windows of one GPU, or of all the run's GPUs together
    (`gpus` set: power and energy summed, utilisation and clocks averaged, the worst temperature
    and memory)."""

    index: int | str | None = None  # the GPU (per-GPU summaries); "worker:index" in a merged run
    gpus: int | None = None  # a combined summary: how many GPUs
    interval_s: float
    sample_count: int
    window_sample_count: int
    gpu_util_mean_pct: float | None = None
    memory_util_mean_pct: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    energy_j_per_1000_samples: float | None = None
    sm_clock_mean_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    temperature_max_c: float | None = None
    memory_used_max_bytes: int | None = None
    slowdown_reasons: list[str] = Field(default_factory=list)
    samples: list[TelemetrySample] = Field(default_factory=list)  # all of them, warm-up included


class ComputeProcess(Part):
    pid: int
    used_memory_bytes: int | None = None


class GpuInfo(Part):
    """A GPU as NVML describes it (None where NVML does not say)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    power_limit_w: float | None = None
    sm_clock_max_mhz: int | None = None
    sm_clock_mhz: int | None = None
    pci_bus_id: str | None = None
    compute_processes: list[ComputeProcess] = Field(default_factory=list)
    catalog_id: str | None = None  # the catalog entry it matched (gpuscout catalog)


class Flag(Part):
    """A warning about the run, with the hint of what to do next (analysis/flags.py)."""

    code: str  # high_variance | slow_first_window | throttled | gpu_shared | straggler | input_bound | ...
    message: str
    hint: str


class Explanation(Part):
    """A known failure found in a run's output (gpuscout.explain): the same as `doctor --explain`."""

    code: str  # the class in explain/known.toml
    title: str
    evidence: str  # the log line it matched (cut to 300 characters around the match)
    line: int  # 1-based, in the text read
    cause: str
    fix: str  # for the machine the run was on (doctor --explain: this one)
    source: str  # a public report of the message
    seen_in: str  # where the message comes from, and the versions
    echo_of: str | None = None  # the root failure in the same text this one follows from
    occurrences: int = 1


class ErrorDetail(Part):
    """Why a run did not finish ok: a message, the tail of the child's output, and the known
    failures found in them, root cause first."""

    message: str | None
    stderr_tail: str
    returncode: int | None
    explanations: list[Explanation] = Field(default_factory=list)


class HourlyCost(Part):
    usd_per_hour: Amount
    basis: str  # one line a user can check
    kind: str  # given | cloud | owned
    provider: str | None = None
    date: str | None = None
    stale: bool = False
    source: str | None = None


class Cost(Part):
    """What the run's throughput costs at `hourly` (docs/catalog.md)."""

    hourly: HourlyCost
    usd_per_million_units: Amount | None = None  # units: the record's (images, samples, tokens)
    usd_per_epoch: Amount | None = None
    usd_per_time_to_accuracy: Amount | None = None
    kwh_per_million_units: Amount | None = None


class Environment(Part):
    """Provenance: where and how the run was made."""

    gpuscout_version: str
    methodology_version: int
    schema_version: int
    python: str | None = None
    platform: str | None = None
    hostname: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    host_memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports
    nvml_error: str | None = None
    command_line: str | None = None
    child_env: dict[str, str] = Field(default_factory=dict)  # XLA_*, TF_*, JAX_*, CUDA_* ... as the child saw them
    framework: FrameworkInfo | None = None
    compiled: str | None = None


class Distribution(DistributionDetails):
    """A run over several devices (or several worker processes)."""

    kind: Literal["mirrored", "multi_worker"]
    workers: int | None = None  # a merged multi-worker run
    worker_run_ids: list[str] | None = None
    addresses: list[str | None] | None = None


class Latency(Part):
    """Latency of single synchronised requests (nearest-rank percentiles, analysis/latency.py)."""

    count: int
    mean_ms: float
    min_ms: float
    max_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float


class LoadTest(Part):
    clients: int
    batch_size: int
    seconds: float
    requests: int
    samples_per_s: float
    thread_safe: bool
    latency: Latency


class Inference(Part):
    """An inference run's own part: one record per batch size (bench --mode inference)."""

    format: str  # keras | saved_model | litert | onnx | tensorrt
    variant: str  # a LiteRT conversion, else the precision
    flops_per_sample: float | None = None  # forward FLOPs
    latency: Latency | None = None
    load_test: LoadTest | None = None
    input_path: InputPath | None = None
    serving: Server | None = None
    agreement: Agreement | None = None
    trained_on: TrainedOn | None = None


class TuneTag(Part):
    session: str
    part: str  # ablation | batch_probe | batch_curve
    label: str


class ScaleTag(Part):
    session: str
    mode: str | None  # weak | strong
    devices: int
    role: str | None = None  # worker | merged (multi-worker runs)


class ClusterTag(Part):
    id: str
    index: int | None  # None: the merged record
    workers: int
    address: str | None = None
    role: str | None = None


class RunRecord(Part):
    """One benchmark run, as stored. `kind` tells records of different kinds apart in one store."""

    kind: Literal["benchmark"] = "benchmark"
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    created_utc: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T")
    group_id: str = Field(min_length=1)  # the runs of one command (bench invocation, tune/scale session, cluster)
    repeat_index: int = Field(ge=0)
    workload: str
    backend: Backend
    precision: Precision
    xla: bool
    mode: Literal["training", "inference"] = "training"
    batch_size: int = Field(ge=1)  # samples per step over all of the run's devices
    devices: int = Field(ge=1)
    per_device_batch_size: int = Field(ge=1)
    seq_len: int | None = None
    data: DataMode
    device: Literal["cpu", "gpu"]
    status: Status
    error: ErrorDetail | None = None
    duration_s: Amount  # the child's whole life, start-up and compilation included
    unit: str  # what throughput counts, per second: images/s, samples/s, tokens/s
    units_per_sample: int = Field(ge=1)  # tokens per sequence for token workloads, else 1
    throughput: Throughput | None = None
    samples_per_s: Amount | None = None
    step_time_s: Amount | None = None
    epoch_time_s: Amount | None = None  # of the workload's reference dataset (or the real one, to accuracy)
    compile_s: float | None = None
    # What the persistent compilation cache gave the run (a sweep's trials share one): with hits,
    # compile_s is partly loading programs, not compiling them.
    compilation_cache: CompilationCacheUse | None = None
    warmup_s: float | None = None
    steps_per_window: int | None = None
    windows: list[Window] = Field(default_factory=list)
    loss: float | None = Field(default=None, allow_inf_nan=True)
    fixed_step_loss: float | None = Field(default=None, allow_inf_nan=True)
    fixed_steps: int | None = None
    input_wait_share: float | None = None  # of the windows' time spent waiting for input (pipeline modes)
    peak_memory_bytes: int | None = None  # framework allocator peak, per device
    host_peak_rss_bytes: int | None = None
    nvml_peak_memory_bytes: int | None = None
    training_flops_per_sample: float | None = None  # analytic: 3 x forward, 2 FLOPs per multiply-add
    estimated_peak_memory_bytes: float | None = None  # per device (gpuscout/workloads/sizing.py)
    achieved_tflops: float | None = None
    mfu: float | None = None  # achieved / the catalog's dense peak for the precision
    mfu_peak_tflops: float | None = None
    mfu_peak_path: str | None = None
    telemetry: Telemetry | None = None
    telemetry_per_gpu: list[Telemetry] | None = None
    time_to_accuracy: TimeToAccuracy | None = None
    cost: Cost | None = None
    flags: list[Flag] = Field(default_factory=list)
    gpu: GpuInfo | None = None  # the run's first GPU
    gpus: list[GpuInfo] | None = None  # every GPU of a run over several
    distribution: Distribution | None = None
    inference: Inference | None = None
    spec: RunSpec
    env: Environment
    tune: TuneTag | None = None
    scale: ScaleTag | None = None
    cluster: ClusterTag | None = None
    gpuscout_version: str
    methodology_version: int
    schema_version: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def gpu_label(self) -> str:
        """The GPU (or "cpu") the run used, "2x NVIDIA H200" for several."""
        name = (self.gpu.name if self.gpu else None) or self.device
        return f"{self.devices}x {name}" if self.devices > 1 else name

    @property
    def batchnorm(self) -> str | None:
        """per_replica | global: batch-norm statistics of a run over several devices (None: one)."""
        stats = self.spec.batchnorm_stats
        return stats.value if stats else None

    def window_rates(self) -> list[float]:
        """The windows' throughputs in samples/s."""
        return [w.throughput / self.units_per_sample for w in self.windows]
