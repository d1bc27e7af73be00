"""A watched script's record, derived from the instrumentation's events and the telemetry the
parent sampled (gpuscout.measure.watching runs the script); its verdict is analysis/verdict.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscout import catalog
from gpuscout.analysis.device_causes import precision_of
from gpuscout.analysis.epoch_clock import epoch_clock
from gpuscout.analysis.telemetry import combine_telemetry, summarize_telemetry
from gpuscout.analysis.verdict import verdict
from gpuscout.analysis.watch_fits import fits_of
from gpuscout.analysis.watch_windows import throughput_of, traced_notes, warmup_notes, warmup_windows
from gpuscout.core.versions import SCHEMA_VERSION
from gpuscout.core.watch_events import (
    Applied,
    Hooked,
    TraceWritten,
    WatchEvent,
)
from gpuscout.record.child import ChildWindow
from gpuscout.record.run import Environment, ErrorDetail, GpuInfo, TelemetrySample
from gpuscout.record.trial import TrialSteps
from gpuscout.record.watch import Trace, WatchedFit, WatchRecord, WatchWindow, headline, untraced


@dataclass
class Observed:
    """What the parent saw of a watched command."""

    command: list[str]
    workload: str
    mode: str  # command | pid | in_process
    status: str
    exit_code: int | None
    duration_s: float
    events: list[WatchEvent]  # decoded (core/watch_events.decode), in the order they came
    environment: dict[str, Any]  # host provenance
    child_env: dict[str, str]
    group_id: str
    record_id: str
    created_utc: str
    cwd: str | None = None
    script_sha256: str | None = None  # the script file's bytes when it ran (measure/command.script_digest)
    attached_pid: int | None = None
    limit: str | None = None
    interrupted_by: str | None = None
    tune_change: str | None = None
    stderr_tail: str = ""
    gpus: list[GpuInfo] = field(default_factory=list)  # the GPUs the command used
    samples: list[list[TelemetrySample]] = field(default_factory=list)  # per GPU, in that order
    interval_s: float = 0.1
    other_pids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # bench/tune measurements of mixed precision on this GPU kind: (speedup, what it was measured on)
    precision_reference: tuple[float, str] | None = None
    ended_monotonic_s: float | None = None  # when the command ended (the child's clock is the same)
    warm_start: bool = False  # forked from a warm interpreter (measure/series.py)


def derive(seen: Observed) -> WatchRecord:
    from gpuscout.core.versions import METHODOLOGY_VERSION, __version__

    fits = fits_of(seen.events, seen.ended_monotonic_s)
    main = max(fits, key=lambda f: f.steps, default=None)
    windows = main.windows if main else []
    timed = untraced(windows)
    warmup = warmup_windows(timed)
    steady = timed[warmup:]
    gpu = seen.gpus[0] if seen.gpus else None
    entry = catalog.match(gpu.name) if gpu else None
    record: dict[str, Any] = {
        "id": seen.record_id,
        "created_utc": seen.created_utc,
        "group_id": seen.group_id,
        "mode": seen.mode,
        "workload": seen.workload,
        "command": seen.command,
        "cwd": seen.cwd,
        "script_sha256": seen.script_sha256,
        "attached_pid": seen.attached_pid,
        "status": seen.status,
        "exit_code": seen.exit_code,
        "duration_s": seen.duration_s,
        "limit": seen.limit,
        "interrupted_by": seen.interrupted_by if seen.status == "interrupted" else None,
        "error": _explained(
            ErrorDetail(
                message=f"exited with code {seen.exit_code}", stderr_tail=seen.stderr_tail, returncode=seen.exit_code
            ),
            seen,
            main,
            gpu,
        )
        if seen.status == "failed"
        else None,
        "instrumented": any(isinstance(e, Hooked) for e in seen.events),
        "warm_start": seen.warm_start,
        "tune_change": seen.tune_change,
        "applied": {e.change: e.detail for e in seen.events if isinstance(e, Applied)},
        "fits": fits,
        "batch_size": main.batch_size if main else None,
        "windows": windows,
        "warmup_windows": warmup,
        "warmup_steps": sum(w.steps for w in timed[:warmup]),
        "gpu": None if gpu is None else gpu.model_copy(update={"catalog_id": entry.id if entry else None}),
        "gpus": list(seen.gpus) if len(seen.gpus) > 1 else None,
        "trace": _trace(seen.events),
        "notes": [*seen.notes, *_fit_notes(main), *warmup_notes(timed, warmup), *traced_notes(windows)],
        "env": Environment(**seen.environment, child_env=seen.child_env),
        "gpuscout_version": __version__,
        "methodology_version": METHODOLOGY_VERSION,
        "schema_version": SCHEMA_VERSION,
    }
    record.update(throughput_of(main, entry, steady))
    record["clock"] = epoch_clock(main)
    record.setdefault("windows_samples_per_s", None)
    record["samples_per_s"] = headline(record["clock"], record["windows_samples_per_s"])
    record.update(_telemetry(seen, steady))
    made = WatchRecord(**record)
    return made.model_copy(update={"verdict": verdict(made, seen.other_pids, seen.precision_reference)})


def _explained(error: ErrorDetail, seen: Observed, main: WatchedFit | None, gpu: GpuInfo | None) -> ErrorDetail:
    """The crash's known failures (gpuscout.explain), fixes for the watched machine and fit."""
    from gpuscout.explain import Context, Machine, explained

    env = Environment(**seen.environment, child_env=seen.child_env)
    context = Context(
        batch_size=main.batch_size if main else None,
        precision=precision_of(main.precision_policy).value if main and main.precision_policy else None,
        framework=main.backend if main else None,
    )
    return explained(error, Machine.from_record(env, gpu, None), context)


def summary(events: list[WatchEvent]) -> TrialSteps | None:
    """A sweep trial's step timing: its main fit's steps, median step time and samples/s over the
    windows, and the shares of time waiting for input and between steps. None without a fit."""
    main = max(fits_of(events), key=lambda f: f.steps, default=None)
    if main is None or not main.windows:
        return None
    timed = untraced(main.windows)
    figures = throughput_of(main, None, timed[warmup_windows(timed) :])
    return TrialSteps(
        steps=main.steps,
        batch_size=main.batch_size,
        step_time_s=figures["step_time_s"],
        samples_per_s=figures.get("windows_samples_per_s"),
        input_wait_share=figures["input_wait_share"],
        outside_step_share=figures["outside_step_share"],
        compile_s=main.compile_s,
        precision_policy=main.precision_policy,
        backend=main.backend,
        epochs_planned=main.epochs_planned,
    )


def _fit_notes(main: WatchedFit | None) -> list[str]:
    if main is None or not main.input_in_graph:
        return []
    return [
        f"input wait not measured: with steps_per_execution {main.steps_per_execution} on tensorflow, Keras "
        "reads the tf.data input inside its compiled loop, which gpuscout leaves as it is (each call's "
        "steps are counted, the epoch's last call as whole)"
    ]


def _trace(events: list[WatchEvent]) -> Trace | None:
    found = [e for e in events if isinstance(e, TraceWritten)]
    if not found:
        return None
    e = found[-1]
    return Trace(
        dir=e.dir,
        first_step=e.first_step,
        last_step=e.last_step,
        ok=e.ok,
        message=e.message,
        command=f"tensorboard --logdir {e.dir}" if e.ok else None,
        devices=e.devices,
        kernels_note=e.kernels_note,
    )


# Fewer NVML samples than this inside the timed windows (a short fit: windows of milliseconds
# between 10 Hz samples) and the summary is taken over the whole fit, then the whole run.
MIN_WINDOW_SAMPLES = 5


def _span(start: float, end: float) -> ChildWindow:
    return ChildWindow(index=0, start_monotonic_s=start, end_monotonic_s=end, steps=0, samples=0, input_wait_s=0.0)


def _spans(seen: Observed, windows: list[WatchWindow]) -> list[ChildWindow]:
    """The time the telemetry is summarised over: the timed windows (compilation and the time
    between fits left out), else the fit from its first window to its last, else the whole run."""
    every = [s.t_monotonic_s for samples in seen.samples for s in samples]
    candidates = []
    if windows:
        candidates.append(
            [
                ChildWindow(
                    index=w.index,
                    start_monotonic_s=w.start_monotonic_s,
                    end_monotonic_s=w.end_monotonic_s,
                    steps=w.steps,
                    samples=w.samples or 0,
                    input_wait_s=w.input_wait_s or 0.0,
                )
                for w in windows
            ]
        )
        candidates.append([_span(windows[0].start_monotonic_s, windows[-1].end_monotonic_s)])
    for spans in candidates:
        inside = sum(1 for t in every if any(w.start_monotonic_s <= t <= w.end_monotonic_s for w in spans))
        if inside >= MIN_WINDOW_SAMPLES:
            return spans
    return [_span(first_busy(seen) or min(every), max(every))]


# NVML utilisation from which the GPU counts as busy, and how much of the second that follows
# must be busy too for the activity to be sustained (not a context's creation, nor one probe kernel).
BUSY_PCT = 10.0
SUSTAINED_SHARE = 0.5


def first_busy(seen: Observed) -> float | None:
    """When the GPU first ran kernels for a while (any GPU of the run): the end of start-up
    (imports, data loading, building, compiling), whose idle time is no training's."""
    samples = sorted((s for gpu in seen.samples for s in gpu), key=lambda s: s.t_monotonic_s)
    ahead = max(3, round(1.0 / seen.interval_s))
    busy = [s.gpu_util_pct is not None and s.gpu_util_pct >= BUSY_PCT for s in samples]
    for i, sample in enumerate(samples):
        following = busy[i : i + ahead]
        if busy[i] and sum(following) >= SUSTAINED_SHARE * len(following):
            return sample.t_monotonic_s
    return None


def _telemetry(seen: Observed, windows: list[WatchWindow]) -> dict[str, Any]:
    if not any(seen.samples):
        return {}
    spans = _spans(seen, windows)
    measured = sum(w.samples for w in spans) or sum(w.samples or 0 for w in windows)
    per_gpu = [
        summarize_telemetry(s, spans, measured, seen.interval_s, index=g.index) for g, s in zip(seen.gpus, seen.samples)
    ]
    per_gpu = [t.model_copy(update={"samples": thinned(t.samples)}) for t in per_gpu]
    telemetry = per_gpu[0] if len(per_gpu) == 1 else combine_telemetry(per_gpu)
    util = telemetry.gpu_util_mean_pct
    out = {
        "telemetry": telemetry,
        "telemetry_per_gpu": per_gpu if len(per_gpu) > 1 else None,
        "gpu_idle_share": None if util is None else max(0.0, 1 - util / 100),
    }
    if not windows:  # no step timing: the busy share is of the steady part, start-up told apart
        busy = first_busy(seen)
        start = min(s.t_monotonic_s for gpu in seen.samples for s in gpu)
        out["startup_s"] = None if busy is None else busy - start
    return out


# Samples kept in the record per GPU: the summary is over all of them; a long watch keeps an even
# subset for the timeline (10 minutes at 10 Hz would be 6,000 per GPU, about 1 MB of JSON).
MAX_STORED_SAMPLES = 1500


def thinned(samples: list[TelemetrySample], most: int = MAX_STORED_SAMPLES) -> list[TelemetrySample]:
    if len(samples) <= most:
        return samples
    step = len(samples) / most
    return [samples[int(i * step)] for i in range(most)]
