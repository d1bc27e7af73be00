"""What a measuring child sends its parent at the end of a run: `ChildResult`.

Raw measurements only (window stamps, sample counts, times, memory): every figure derived from
them (throughput statistics, step and epoch time, MFU, flags, cost) is computed in the parent by
gpuscout.analysis.derive, once. Times in seconds, memory in bytes, stamps from time.monotonic(),
which the parent's telemetry samples share.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuscout.core.spec import ModelInfo
from gpuscout.core.versions import SCHEMA_VERSION

# A record's numbers are counts, sizes, times, rates and shares: never below zero, except these,
# which a training or a process makes signed (a loss, an exit status of -9 for a signal).
SIGNED = {"loss", "fixed_step_loss", "train_loss", "val_loss", "last_loss", "last_finite", "returncode", "exit_code"}
# ... and never below one: sizes of what ran and the versions that wrote it.
AT_LEAST_ONE = {
    "batch_size",
    "seq_len",
    "units_per_sample",
    "replicas",
    "steps_per_execution",
    "schema_version",
    "methodology_version",
}


def _kinds(annotation) -> set:
    """The plain types a field's annotation admits at its top level (through unions and Annotated)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) or typing.get_origin(annotation) is Annotated:
        found: set = set()
        for arg in args if typing.get_origin(annotation) is not Annotated else args[:1]:
            found |= _kinds(arg)
        return found
    return {annotation} if isinstance(annotation, type) else set()


class Part(BaseModel):
    """A part of a result or record: documented fields, nothing else, no NaN or infinity (a loss
    is the exception, and says so), no number below zero (SIGNED excepted) or one (AT_LEAST_ONE),
    and no schema newer than this gpuscout's: an imported or stored record that says otherwise is
    refused by its field, never stored as it stands."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, ser_json_inf_nan="constants")

    @model_validator(mode="before")
    @classmethod
    def _no_truth_for_a_number(cls, data):
        """`true` where a count or a figure is due is no number (pydantic's lax mode reads it as 1:
        issue 79, an imported `"batch_size": true` was stored as batch 1). A model validator, not a
        field's: a field validator before the record's `kind` would undo its discriminated union."""
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(value, bool) else None
                kinds = _kinds(field.annotation) if field is not None else set()
                if kinds & {int, float} and bool not in kinds:
                    raise ValueError(f"{name} should be a number, not {str(value).lower()}")
        return data

    @field_validator("*", mode="after")
    @classmethod
    def _in_range(cls, value, info):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or info.field_name in SIGNED:
            return value
        least = 1 if info.field_name in AT_LEAST_ONE else 0
        if value < least:
            raise ValueError(f"should be at least {least}, got {value}")
        if info.field_name == "schema_version" and value > SCHEMA_VERSION:
            raise ValueError(f"schema {value} is newer than this gpuscout's ({SCHEMA_VERSION}): upgrade gpuscout")
        return value


class FrameworkInfo(Part):
    """The framework as the child saw it."""

    backend: str | None = None  # tensorflow | jax
    backend_version: str | None = None
    keras_version: str | None = None
    platform: str | None = None  # gpu | cpu: where the framework put the work
    devices: list[str] = Field(default_factory=list)
    cuda_version: str | None = None  # as the framework reports it (built against / loaded)
    cudnn_version: str | None = None


class ChildWindow(Part):
    """One timing window: `steps` steps of `samples` samples between two device synchronisations."""

    index: int = Field(ge=0)
    start_monotonic_s: float
    end_monotonic_s: float
    steps: int = Field(ge=0)
    samples: int = Field(ge=0)
    input_wait_s: float = Field(ge=0)  # time the training loop waited for its next batch

    @property
    def duration_s(self) -> float:
        return self.end_monotonic_s - self.start_monotonic_s


class CompilationCacheUse(Part):
    """What a run's persistent compilation cache gave it (jax.monitoring's counts in the child)."""

    programs: int = Field(ge=0)  # programs the run compiled or loaded through the cache
    hits: int = Field(ge=0)  # of them, loaded from the cache instead of compiled
    # (jax's own estimate of the time saved is left out: for programs that compile in a few ms it
    # came out negative on a CPU, loading costing more than the compile it recorded)


class CollectiveSchedule(Part):
    """What the compiled step sends between devices, from XLA's optimised program
    (child/collectives.py): all-reduces as XLA combined them, XLA's own Triton all-reduce kernels
    included, and how many ran asynchronously with kernels scheduled beside them."""

    collectives: int = Field(ge=0)
    payload_bytes: int = Field(ge=0)  # once (not counting the result an all-reduce writes)
    asynchronous: int = Field(ge=0)  # with a start and a done
    beside_compute: int = Field(ge=0)  # of those, with at least one kernel scheduled in between
    payload_bytes_beside_compute: int = Field(ge=0)


class DistributionDetails(Part):
    """What the child learnt about a run over several devices (and the model's size)."""

    strategy: str | None = None  # MirroredStrategy, keras.distribution.DataParallel, ...
    replicas: int | None = None
    all_reduce: str | None = None  # what sums the gradients (NcclAllReduce, XLA all-reduce, ...)
    params: int | None = None  # parameters: the all-reduce's size
    batchnorm_layers: int | None = None
    batchnorm: str | None = None  # per_replica | global (spec.BatchNormStats), what the child ran
    # jax's per-replica step: the gradients averaged in buckets of this size (child/jax_replicas.py);
    # None for other strategies and for records before 2026-11-26 (a pmean of each gradient).
    gradient_bucket_bytes: int | None = None
    # jax only, read after the windows from jit's cache; None where it could not be read (older records)
    collectives: CollectiveSchedule | None = None


class EpochPoint(Part):
    """One epoch of a time-to-accuracy run."""

    epoch: int
    train_loss: float = Field(allow_inf_nan=True)  # a diverging run is data, not a bad record
    train_accuracy: float
    val_loss: float = Field(allow_inf_nan=True)
    val_accuracy: float
    train_s: float
    eval_s: float
    elapsed_s: float  # since the clock started, before the first epoch


class TimeToAccuracy(Part):
    """Training on a real dataset until a validation accuracy (DAWNBench's clock)."""

    target: float
    reached: bool
    dataset: str
    train_samples: int
    val_samples: int
    augmented: bool
    epochs: int
    max_epochs: int
    seconds: float | None  # to the target; None when not reached
    train_seconds: float
    best_val_accuracy: float
    curve: list[EpochPoint]


class InputPath(Part):
    """How an inference server copies a batch of one shape to the GPU: the timed candidates."""

    method: str
    copy_ms: dict[str, float]


class InferencePoint(Part):
    """The requests of one batch size."""

    batch_size: int = Field(ge=1)
    first_request_s: float  # the first request, which compiles
    input_path: InputPath | None = None
    latencies_s: list[float]
    windows: list[ChildWindow]


class LoadTestResult(Part):
    """Closed-loop clients sending requests back to back."""

    clients: int
    batch_size: int
    seconds: float
    requests: int
    latencies_s: list[float]
    samples_per_s: float
    thread_safe: bool


class Agreement(Part):
    """The served format's outputs against the fp32 Keras model's."""

    samples: int
    max_abs_diff: float
    mean_abs_diff: float
    top1_agreement: float
    accuracy: float | None = None  # with a labelled dataset
    reference_accuracy: float | None = None


class Server(Part):
    """What served the requests."""

    describe: str
    device: str  # gpu | cpu
    prepare_s: float  # export, conversion, loading
    artifact_bytes: int | None = None
    format: str
    variant: str


class TrainedOn(Part):
    """The dataset the fp32 reference was trained on before serving (accuracy runs)."""

    dataset: str
    train_samples: int
    val_samples: int
    epochs: int


class InferenceResult(Part):
    points: list[InferencePoint]
    load: LoadTestResult | None = None
    agreement: Agreement
    trained: TrainedOn | None = None
    server: Server


class ChildResult(Part):
    """A measuring child's result. Which parts are filled depends on the run's task: the
    protocol (windows, compile and warm-up), time to accuracy, inference, an input pipeline
    alone, or the inspection of a user's model."""

    pid: int | None = None
    framework: FrameworkInfo | None = None
    compiled: str | None = None  # one line saying what was compiled
    compile_s: float | None = None  # the first step (or request): compilation and autotuning
    warmup_s: float | None = None
    steps_per_window: int | None = None
    windows: list[ChildWindow] = Field(default_factory=list)
    loss: float | None = Field(default=None, allow_inf_nan=True)  # at the last step; NaN: training broke
    # The loss after exactly `fixed_steps` steps, the same step for every configuration.
    fixed_step_loss: float | None = Field(default=None, allow_inf_nan=True)
    fixed_steps: int | None = None
    peak_memory_bytes: int | None = None  # the framework allocator's peak, largest over the devices
    host_peak_rss_bytes: int | None = None
    distribution: DistributionDetails | None = None
    compilation_cache: CompilationCacheUse | None = None  # runs with spec.compilation_cache
    time_to_accuracy: TimeToAccuracy | None = None
    inference: InferenceResult | None = None
    pipeline_source: str | None = None  # Task.pipeline: what was measured
    model_info: ModelInfo | None = None  # Task.inspect


@dataclass
class ChildOutcome:
    """How a measuring child ended (executor/local.py classifies it)."""

    status: str  # ok | oom | failed | timeout
    result: ChildResult | None  # set when status is ok
    message: str | None = None  # why it failed
    stderr_tail: str = ""
    returncode: int | None = None
    duration_s: float = 0.0
    events: list[dict] = field(default_factory=list)
