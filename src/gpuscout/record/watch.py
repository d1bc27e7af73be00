"""The stored record of a watched training script (`gpuscout watch`): `WatchRecord`.

A record of its own kind beside RunRecord in the same store: the command, what each Model.fit
(or a loop marked with gpuscout.watch.step) did, NVML telemetry of the GPUs the script used,
and the verdict. Figures are derived in gpuscout.analysis.watch, once. Units as in record/run.py;
throughputs here are always samples/s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpuscout.record.augment import InlineAugment, MapAugment, SampleWork
from gpuscout.record.child import Part
from gpuscout.record.epochs import EpochClock, Reading, WatchEpoch
from gpuscout.record.run import SCHEMA_VERSION, Amount, Environment, ErrorDetail, GpuInfo, Telemetry, Throughput


class WatchWindow(Part):
    """Steps between two synchronisations (about a second apart), timed by the instrumentation."""

    index: int
    start_monotonic_s: float
    end_monotonic_s: float
    steps: int
    samples: int | None  # None: a custom loop that did not say
    input_wait_s: float | None  # blocked on the next batch; None where it cannot be seen (a custom loop)
    outside_step_s: float | None  # between steps: callbacks and the loop's own work
    seconds: Amount
    samples_per_s: Amount | None
    step_time_s: Amount
    traced: bool = False  # its steps ran under --trace-steps' profiler: left out of the figures
    # fit's loss at the window's end (Keras' mean over the epoch's steps so far: once a step's loss
    # is NaN, it stays NaN to the epoch's end); None: a custom loop, or a record before this
    loss: Reading | None = None


def untraced(windows: list[WatchWindow]) -> list[WatchWindow]:
    """The windows whose steps ran without --trace-steps' profiler: the ones the figures are of (the
    profiler's start-up and its tracing slow the traced steps, 3.5x on a 2.5 ms step on 2026-11-27)."""
    return [w for w in windows if not w.traced]


class CallSite(Part):
    """Where the script wrote something `tune --patch` changes: the line that called fit or compile,
    the `def` of a PyDataset's `__init__` or of a generator's function."""

    file: str
    line: int
    name: str | None = None  # the function's name (input sites)


class PipelineOp(Part):
    """One call of the script's own that built the tf.data dataset fit was given
    (child/tf_data.py), in the order made: where it is, and for a map, whether its elements repeat
    (what a cache after it needs)."""

    op: str  # map, interleave, batch, shuffle, cache, prefetch, repeat, ...
    file: str
    line: int
    parallel: bool | None = None  # map/interleave/batch: num_parallel_calls given
    repeats: bool | None = None  # a map's first elements made twice were the same (None: not checked)
    repeats_note: str | None = None  # why the check could not be made
    elements: int | None = None  # a map's output's cardinality (None: not known, or endless)
    endless: bool = False  # ... it has no end (a repeat() before it)
    element_bytes: int | None = None
    augment: MapAugment | None = None  # a random map's work told as layers (tune's probe), or why not

    @property
    def at(self) -> str:
        return f"{self.file}:{self.line}"


class InputRepeats(Part):
    """Whether the batches a Python input made repeat (child/input_repeats.py): for a PyDataset
    (`order` "epoch"), each later epoch's batches against the first's; for a generator ("stream"),
    each batch against the one a period before it."""

    checked: int = 0  # batches compared with one seen before
    same: int = 0
    order: Literal["epoch", "stream"] = "epoch"
    period: int | None = None  # a generator's: batches before its first batch came again
    batches: int | None = None  # a PyDataset's first epoch's distinct batches
    bytes: int | None = None  # host memory of the first epoch's (or period's) batches: what a cache keeps
    hash_s: float | None = None  # what the digests cost the run
    stopped: str | None = None  # why checking stopped before any comparison (framework tensors...)

    @property
    def repeat(self) -> bool:
        return self.checked > 0 and self.same == self.checked


class Divergence(Part):
    """Where a fit's loss (or another value of its logs) first stopped being a finite number."""

    metric: str  # loss, val_loss, or a metric's name
    value: Literal["NaN", "inf", "-inf"]
    epoch: int | None = None  # fit's epoch, from 1; None: no epoch had ended
    # Between these steps of that epoch (from 1) it first went so: the window it was first seen at
    # the end of (Keras' running mean carries a NaN step to the epoch's end). None: not seen per window.
    first_step: int | None = None
    last_step: int | None = None
    last_finite: float | None = None  # the value before, where one was seen (the last window's or epoch's)
    last_finite_step: int | None = None  # the epoch's step of that value


class WatchedFit(Part):
    """One Model.fit call (or the custom loop: `custom` true), and what it ran."""

    pid: int
    index: int | None = None  # the fit's number in its process; None for the custom loop
    custom: bool = False
    backend: str | None = None
    keras_version: str | None = None
    model: str | None = None
    params: int | None = None
    forward_flops_per_sample: float | None = None  # counted on the built model (child/flops.py)
    flops_coverage: float | None = None
    batch_size: int | None = None
    batch_bytes: int | None = None  # the bytes of one batch's arrays (inputs and targets), from the first one read
    input_type: str | None = None  # numpy, tf.data, PyDataset, generator, jax array, ...
    input_in_graph: bool = False  # read inside a compiled loop of several steps: its wait is not seen
    input_workers: int | None = None  # a PyDataset's workers
    input_multiprocessing: bool | None = None  # ... processes (True) or threads
    sync_callbacks: list[str] = Field(default_factory=list)  # callbacks that make Keras wait for each step's logs
    rate_callback: str | None = None  # a callback that sets the learning rate itself (ReduceLROnPlateau, ...)
    precision_policy: str | None = None
    compute_dtype: str | None = None
    jit_compile: bool | None = None
    run_eagerly: bool = False  # compile(run_eagerly=True) or model.run_eagerly = True: no compiled step at all
    steps_per_execution: int | None = None
    epochs_planned: int | None = None  # fit's `epochs`
    steps_per_epoch: int | None = None  # None: until the data ran out
    # fit's arguments that decide the training a change must keep (tune/same_training.py), as given:
    shuffle: bool | Literal["batch"] | None = None  # None: not given (Keras shuffles arrays each epoch)
    validation: bool = False  # validation_data or validation_split given
    validation_steps: int | None = None  # fit's validation_steps
    weighted: bool = False  # sample_weight or class_weight given
    validation_maps: list[str] = Field(default_factory=list)  # a tf.data validation set's maps, FILE:LINE
    validation_input: str | None = None  # what validates: numpy (arrays, validation_split's), tf.data, ...
    validation_batch_size: int | None = None  # fit's validation_batch_size, where given
    strategy: str | None = None  # DataParallel, MirroredStrategy, ... (None: one device)
    replicas: int = 1  # devices the step ran on; batch_size is the global batch, split over them
    devices: int | None = None  # devices the framework could train on (None: not known, a record before this)
    compile_s: float | None = None
    steps: int = 0
    samples: int = 0
    peak_memory_bytes: int | None = None
    stopped_by_limit: bool = False
    last_loss: Reading | None = None  # the loss of the last step run (tune compares it at equal steps)
    diverged: Divergence | None = None  # where its loss (or a logged value) went NaN or infinite
    optimizer: str | None = None  # the optimizer's class (Adam, SGD, LossScaleOptimizer(Adam), ...)
    learning_rate: float | None = None  # its initial learning rate, where it is a number
    input_repeats: InputRepeats | None = None
    pipeline: list[PipelineOp] = Field(default_factory=list)  # a tf.data input: the script's calls that built it
    sample_work: SampleWork | None = None  # a PyDataset's: where its __getitem__ spends its time
    generator_inline: InlineAugment | None = None  # a generator's: its loop's augmentation (tune's probe)
    own_train_step: bool = False  # the model's class defines its own train_step
    augmented_in_model: bool = False  # fit ran the model behind the layers that do the PyDataset's augmentation
    sites: dict[Literal["fit", "compile", "input"], CallSite] = Field(default_factory=dict)
    windows: list[WatchWindow] = Field(default_factory=list)
    epochs: list[WatchEpoch] = Field(default_factory=list)
    # A fit that began and whose first step (the compile, then the step) had not ended when the
    # run did: how long it had been waiting (None: its first step ended, or a record before this)
    first_step_unfinished_s: Amount | None = None


class Cause(Part):
    """One finding of the verdict, ranked by the share of the wall time it could save."""

    code: str  # input_bound, host_bound, fp32_on_tensor_cores, xla_off, unused_memory, gpu_shared, throttled, ...
    saving_share: float | None  # of the training time, at most; None: not estimated
    message: str
    evidence: str
    fix: str
    code_snippet: str | None = None


class TraceDevice(Part):
    """One GPU's kernels in the trace, in ms a step (measure/trace_kernels.py)."""

    device: str  # as the trace names it: /device:GPU:0
    kernels_per_step: float
    busy_ms: float  # the union of its kernels
    collectives_ms: float  # the union of its collective kernels (NCCL's all-reduce, ...)
    collectives_alone_ms: float  # of those, with no other kernel of the GPU running: waited for
    span_ms: float  # its first kernel's start to its last kernel's end
    # what the computing kernels beside the collectives took beyond their usual time alone
    # (trace_kernels.slowed_beside); 0 in records from before 2026-11-27
    slowed_beside_collectives_ms: float = 0.0


class Trace(Part):
    dir: str
    first_step: int
    last_step: int
    ok: bool
    message: str | None = None
    command: str | None = None  # what opens it
    devices: list[TraceDevice] = Field(default_factory=list)  # empty: no GPU kernels read (a CPU run)
    kernels_note: str | None = None  # why the kernels were not read


def headline(clock: EpochClock | None, windows_samples_per_s: float | None) -> float | None:
    """A watched run's one figure (`WatchRecord.samples_per_s`): its whole steady epochs' where it
    ran them, else its steady windows' median."""
    return (clock.samples_per_s if clock else None) or windows_samples_per_s


class WatchRecord(Part):
    """A watched training script, as stored."""

    kind: Literal["watch"] = "watch"
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    created_utc: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T")
    group_id: str = Field(min_length=1)
    # command: `watch -- COMMAND` (a notebook file too); pid: `watch --pid`; in_process: watched in the
    # process that trained (a notebook's cell, `gpuscout.watching()`, `gpuscout.callback()`)
    mode: Literal["command", "pid", "in_process"]
    workload: str  # the script (or the command's first word), for listing and comparing
    command: list[str]
    cwd: str | None = None
    # the SHA-256 of the script file's bytes as it ran (a Python command's; None for a shell line, -m,
    # a notebook cell): with `cwd` and `command`, which script a run is of (measure/command.ScriptIdentity)
    script_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    attached_pid: int | None = None
    status: Literal["ok", "failed", "stopped", "interrupted"]  # stopped: by --steps/--duration, as asked
    exit_code: int | None = None
    error: ErrorDetail | None = None
    duration_s: Amount
    limit: str | None = None  # what stopped it (--steps, --duration)
    interrupted_by: str | None = None  # the signal that stopped gpuscout (SIGINT: Ctrl-C; SIGTERM: kill, a scheduler)
    instrumented: bool  # the hook ran in a Python process of the command
    # forked from a warm interpreter that had imported the script's frameworks under the run's own
    # environment (tune's runs after the first: measure/series.py); its duration holds no imports
    warm_start: bool = False
    # `gpuscout tune -- COMMAND`: the change this run made (None: the baseline, or a plain watch),
    # and what the instrumentation applied for it, as it said (change -> the line it stands for)
    tune_change: str | None = None
    applied: dict[str, str] = Field(default_factory=dict)
    fits: list[WatchedFit] = Field(default_factory=list)
    # The main fit's figures (the one with the most steps), for listing and comparing
    unit: str = "samples/s"
    units_per_sample: int = 1
    batch_size: int | None = None
    windows: list[WatchWindow] = Field(default_factory=list)  # all of them, warm-up first
    # Leading windows left out as warm-up (the first after the compile, and any more until the step
    # time settles, as bench discards its warm-up steps): every figure below is of the rest.
    warmup_windows: int = 0
    warmup_steps: int = 0
    throughput: Throughput | None = None  # the steady windows' samples/s: median and 95% interval
    # The run's headline, the one figure every output shows (terminal, --json, export, MLflow,
    # report): by its whole steady epochs (`clock`) where it ran them, the user's own clock with
    # validation and callbacks in; else the windows' median (issue 87: two headlines had diverged 2x)
    samples_per_s: Amount | None = Field(
        default=None,
        description="the headline, as the terminal shows it: samples/s over the main fit's whole steady epochs "
        "(validation and callbacks in) where it ran them, else windows_samples_per_s",
    )
    # The steady windows' median, the training steps alone (what the windows locate causes by)
    windows_samples_per_s: Amount | None = Field(
        default=None, description="the steady timing windows' median samples/s: the training steps alone"
    )
    # The main fit's whole epochs, the first left out (analysis/epoch_clock.py): the user's own clock.
    # None: fewer than two whole epochs ran (or a record before this)
    clock: EpochClock | None = None
    step_time_s: Amount | None = None
    input_wait_share: float | None = None  # of the windows' time, blocked on the next batch
    outside_step_share: float | None = None
    gpu_idle_share: float | None = None  # 1 - NVML utilisation over the steady windows (or steady part)
    # Without step timing: seconds from the command's start to the GPU's first sustained activity
    # (imports, data loading, compilation), left out of the busy share
    startup_s: float | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None
    mfu_peak_tflops: float | None = None
    telemetry: Telemetry | None = None
    telemetry_per_gpu: list[Telemetry] | None = None
    gpu: GpuInfo | None = None
    gpus: list[GpuInfo] | None = None
    verdict: list[Cause] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # how the figures were got, where that is not plain
    trace: Trace | None = None
    env: Environment
    gpuscout_version: str
    methodology_version: int
    schema_version: int = SCHEMA_VERSION

    @model_validator(mode="before")
    @classmethod
    def _one_headline(cls, data):
        """A record stored before the headline was one figure (no `windows_samples_per_s`) held the
        windows' median as `samples_per_s`: read, it is moved to its own name and the headline made
        from the record's own epochs, as analysis/watch.py makes it now."""
        if isinstance(data, dict) and "windows_samples_per_s" not in data and "samples_per_s" in data:
            data = {**data, "windows_samples_per_s": data["samples_per_s"]}
            clock = data.get("clock")
            if isinstance(clock, dict):
                try:
                    clock = EpochClock.model_validate(clock)
                except ValueError:
                    return data  # the field's own validation names what is wrong
            if isinstance(clock, EpochClock):
                data["samples_per_s"] = headline(clock, data["windows_samples_per_s"])
        return data

    @property
    def by_epochs(self) -> bool:
        """Whether the headline is its whole epochs' (else its windows')."""
        return self.clock is not None and bool(self.clock.samples_per_s)

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "stopped")

    @property
    def device(self) -> str:
        return "gpu" if self.gpu else "cpu"

    @property
    def gpu_label(self) -> str:
        name = (self.gpu.name if self.gpu else None) or "cpu"
        return f"{len(self.gpus)}x {name}" if self.gpus and len(self.gpus) > 1 else name

    @property
    def main(self) -> WatchedFit | None:
        """The fit (or loop) the record's figures are of: the one with the most steps."""
        return max(self.fits, key=lambda f: f.steps, default=None)

    @property
    def steady(self) -> list[WatchWindow]:
        """The windows the figures are of: warm-up and the profiler's traced steps left out."""
        return untraced(self.windows)[self.warmup_windows :]

    def window_rates(self) -> list[float]:
        return [w.samples_per_s for w in self.steady if w.samples_per_s is not None]
