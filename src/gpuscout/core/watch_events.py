"""What a watched process tells gpuscout, one frozen dataclass per kind of event.

The child sends each event as a JSON object on gpuscout's channel (core/events.py); the parent
decodes it here, once, into the dataclass of its kind, and every reader after that (the record's
derivation, the limits, the live view, a sweep's pruner) reads attributes the type checker knows.
An object that is not one of these kinds, or whose fields are missing or of the wrong type, is not
an event: `decode` gives None for it, as core/events.parse does for a line that is not JSON.

Standard library only: the child side imports this module inside the user's script.
Fields nested deeper than the top level (an epoch's logs, a fit's call sites, the repeat counts)
stay JSON values here; the record's own models (gpuscout.record) validate them.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watched process: `pid` is the process that sent it."""

    KIND: ClassVar[str]
    pid: int

    def to_json(self) -> JsonObject:
        """The event as the channel carries it (the inverse of `decode`)."""
        return {"event": self.KIND, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Hooked(WatchEvent):
    """The instrumentation is installed in a process (before the script's first line)."""

    KIND: ClassVar[str] = "watch_hooked"
    python: str = ""
    argv: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FitBegan(WatchEvent):
    """Model.fit was called: its arguments that decide the training (child/fit_input.py)."""

    KIND: ClassVar[str] = "watch_fit_begin"
    fit: int
    began_monotonic_s: float
    epochs: int | None = None
    batch_size: int | None = None
    shuffle: bool | str | None = None  # None: not given; "batch": Keras' batch-wise shuffle
    validation: bool = False
    validation_steps: int | None = None
    weighted: bool = False
    validation_maps: list[str] = field(default_factory=list)  # a tf.data validation set's maps, FILE:LINE
    validation_input: str | None = None  # what validates: numpy (arrays), tf.data, PyDataset, generator
    validation_batch_size: int | None = None  # fit's, where given


@dataclass(frozen=True)
class FitAnnounced(WatchEvent):
    """A fit's first step has ended: what it trains and how (child/model_facts.py, watch_fit.py)."""

    KIND: ClassVar[str] = "watch_fit"
    fit: int
    backend: str | None = None
    keras_version: str | None = None
    model: str | None = None
    params: int | None = None
    input_type: str | None = None
    precision_policy: str | None = None
    compute_dtype: str | None = None
    jit_compile: bool | None = None
    run_eagerly: bool = False
    steps_per_execution: int | None = None
    strategy: str | None = None
    replicas: int | None = None
    devices: int | None = None
    forward_flops: float | None = None
    flops_coverage: float | None = None
    own_train_step: bool = False
    optimizer: str | None = None
    learning_rate: float | None = None
    batch_size: int | None = None
    batch_bytes: int | None = None
    compile_s: float | None = None
    started_monotonic_s: float | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    input_in_graph: bool = False
    input_workers: int | None = None
    input_multiprocessing: bool | None = None
    sync_callbacks: list[str] = field(default_factory=list)
    rate_callback: str | None = None
    augmented_in_model: bool = False
    sites: dict[str, Any] = field(default_factory=dict)  # fit, compile, input: a CallSite's fields or None


@dataclass(frozen=True)
class Window(WatchEvent):
    """A window of steps: a fit's (`fit` its number) or the custom loop's (`fit` None)."""

    KIND: ClassVar[str] = "watch_window"
    fit: int | None
    index: int
    start_monotonic_s: float
    end_monotonic_s: float
    steps: int
    samples: int | None = None  # None: the batch's size was not seen
    input_wait_s: float | None = None  # None: the input was read where it cannot be seen
    outside_step_s: float | None = None
    traced: bool = False
    loss: float | None = None


@dataclass(frozen=True)
class EpochEnded(WatchEvent):
    """An epoch of a fit has ended, validation included."""

    KIND: ClassVar[str] = "watch_epoch"
    fit: int
    epoch: int  # from 1
    start_monotonic_s: float
    end_monotonic_s: float  # the training steps' end
    steps: int
    samples: int
    epoch_end_monotonic_s: float | None = None  # with validation and the epoch's callbacks
    logs: dict[str, Any] = field(default_factory=dict)
    callbacks_s: dict[str, float] = field(default_factory=dict)
    validation_steps: int | None = None
    validation_s: float | None = None
    first_batch: str | None = None


@dataclass(frozen=True)
class Pipeline(WatchEvent):
    """A tf.data input's calls, as the script made them (child/tf_data.py)."""

    KIND: ClassVar[str] = "watch_pipeline"
    fit: int
    ops: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class FitEnded(WatchEvent):
    KIND: ClassVar[str] = "watch_fit_end"
    fit: int
    steps: int
    samples: int
    peak_memory_bytes: int | None = None
    stopped_by_limit: bool = False
    last_loss: float | None = None
    input_repeats: dict[str, Any] | None = None
    sample_work: dict[str, Any] | None = None
    generator_inline: dict[str, Any] | None = None  # a generator's loop told as layers (child/inline_augment)


@dataclass(frozen=True)
class CustomLoopStarted(WatchEvent):
    """A training loop of the script's own (no fit) ran its first step."""

    KIND: ClassVar[str] = "watch_custom_start"
    start_monotonic_s: float


@dataclass(frozen=True)
class TraceWritten(WatchEvent):
    """The profiler's trace of a few steps; `devices` and `kernels_note` are the parent's reading
    of it (measure/trace_kernels.py), added once the script has ended."""

    KIND: ClassVar[str] = "watch_trace"
    dir: str
    first_step: int
    last_step: int
    ok: bool
    message: str | None = None
    devices: list[Any] = field(default_factory=list)
    kernels_note: str | None = None


@dataclass(frozen=True)
class Applied(WatchEvent):
    """A tune change was applied (child/tune_state.applied): where, in words."""

    KIND: ClassVar[str] = "watch_applied"
    change: str
    detail: str


@dataclass(frozen=True)
class InstrumentationFailed(WatchEvent):
    KIND: ClassVar[str] = "watch_error"
    message: str


@dataclass(frozen=True)
class LimitReached(WatchEvent):
    """The watch's --steps or --duration is reached: the limited fit stops."""

    KIND: ClassVar[str] = "watch_limit"
    reason: str
    steps: int


@dataclass(frozen=True)
class Halted(WatchEvent):
    """The instrumentation ends the script now (its limit reached outside any fit)."""

    KIND: ClassVar[str] = "watch_halt"
    steps: int
    frameworks: list[str] = field(default_factory=list)  # as Exiting's: what a warm interpreter imports next


@dataclass(frozen=True)
class Exiting(WatchEvent):
    """All of a process's code has run: only its interpreter's shutdown is left."""

    KIND: ClassVar[str] = "watch_exiting"
    steps: int
    uncaught: str | None = None  # the exception that ended the script, by its class's name
    frameworks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MlflowRunSeen(WatchEvent):
    """The script's own MLflow run (child/mlflow_run.py)."""

    KIND: ClassVar[str] = "watch_mlflow_run"
    run_id: str
    tracking_uri: str
    experiment_id: str | None = None


@dataclass(frozen=True)
class SweepReport(WatchEvent):
    """A trial's own report (gpuscout.sweep.report) at `step`, for the sweep's pruner."""

    KIND: ClassVar[str] = "sweep_report"
    step: int
    metrics: dict[str, Any] = field(default_factory=dict)


KINDS: dict[str, type[WatchEvent]] = {
    k.KIND: k
    for k in (
        Hooked,
        FitBegan,
        FitAnnounced,
        Window,
        EpochEnded,
        Pipeline,
        FitEnded,
        CustomLoopStarted,
        TraceWritten,
        Applied,
        InstrumentationFailed,
        LimitReached,
        Halted,
        Exiting,
        MlflowRunSeen,
        SweepReport,
    )
}


def decode(line: bytes | str | JsonObject) -> WatchEvent | None:
    """One line of the channel (or the object it holds) as its event; None for anything else."""
    if isinstance(line, (bytes, str)):
        try:
            obj = json.loads(line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line)
        except ValueError:
            return None
    else:
        obj = line
    if not isinstance(obj, dict):
        return None
    kind = KINDS.get(obj.get("event"))  # type: ignore[arg-type]
    if kind is None:
        return None
    hints = _hints(kind)
    values = {}
    for f in dataclasses.fields(kind):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        value = obj.get(f.name)
        if value is None and type(None) not in typing.get_args(hints[f.name]):
            if required:
                return None  # a field the event cannot be without
            continue  # absent, or null where the field has a default: the default
        value = _checked(value, hints[f.name])
        if value is _WRONG:
            return None
        values[f.name] = value
    return kind(**values)


def decode_all(objects: list[JsonObject]) -> list[WatchEvent]:
    """The events among `objects`, in their order."""
    return [e for e in map(decode, objects) if e is not None]


_WRONG = object()
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    if kind not in _HINTS:
        _HINTS[kind] = typing.get_type_hints(kind)
    return _HINTS[kind]


def _checked(value: Any, hint: Any) -> Any:
    """`value` as the field's type holds it (an int where a float is due becomes a float), or _WRONG."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(hint):
            made = _checked(value, option)
            if made is not _WRONG:
                return made
        return _WRONG
    if hint is type(None):
        return None if value is None else _WRONG
    if hint is Any:
        return value
    if hint is bool:
        return value if isinstance(value, bool) else _WRONG
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _WRONG
    if hint is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _WRONG
    if hint is str:
        return value if isinstance(value, str) else _WRONG
    if origin is list:
        if not isinstance(value, list):
            return _WRONG
        (item,) = typing.get_args(hint)
        made = [_checked(v, item) for v in value]
        return _WRONG if any(m is _WRONG for m in made) else made
    if origin is dict:
        if not isinstance(value, dict):
            return _WRONG
        _, item = typing.get_args(hint)
        made_dict = {str(k): _checked(v, item) for k, v in value.items()}
        return _WRONG if any(m is _WRONG for m in made_dict.values()) else made_dict
    raise TypeError(f"{hint!r}: a type the watch events do not use")  # a new field's type: add it here
