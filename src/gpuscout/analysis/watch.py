"""A watched script's record, derived from the instrumentation's events and the telemetry the
parent sampled (gpuscout.measure.watching runs the script); its verdict is analysis/verdict.py's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gpuscout import catalog
from gpuscout.analysis import divergence
from gpuscout.analysis.device_causes import precision_of
from gpuscout.analysis.epoch_clock import epoch_clock
from gpuscout.analysis.telemetry import combine_telemetry, summarize_telemetry
from gpuscout.analysis.verdict import verdict
from gpuscout.analysis.watch_windows import throughput_of, traced_notes, warmup_notes, warmup_windows, window_of
from gpuscout.record.child import ChildWindow
from gpuscout.record.epochs import WatchEpoch
from gpuscout.record.run import SCHEMA_VERSION, Environment, ErrorDetail, GpuInfo, TelemetrySample
from gpuscout.record.watch import Trace, WatchedFit, WatchRecord, WatchWindow, untraced


@dataclass
class Observed:
    """What the parent saw of a watched command."""

    command: list[str]
    workload: str
    mode: str  # command | pid | in_process
    status: str
    exit_code: int | None
    duration_s: float
    events: list[dict]
    environment: dict  # host provenance
    child_env: dict[str, str]
    group_id: str
    record_id: str
    created_utc: str
    cwd: str | None = None
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


def derive(seen: Observed) -> WatchRecord:
    from gpuscout.core.versions import METHODOLOGY_VERSION, __version__

    fits = _fits(seen.events, seen.ended_monotonic_s)
    main = max(fits, key=lambda f: f.steps, default=None)
    windows = main.windows if main else []
    timed = untraced(windows)
    warmup = warmup_windows(timed)
    steady = timed[warmup:]
    gpu = seen.gpus[0] if seen.gpus else None
    entry = catalog.match(gpu.name) if gpu else None
    record = {
        "id": seen.record_id,
        "created_utc": seen.created_utc,
        "group_id": seen.group_id,
        "mode": seen.mode,
        "workload": seen.workload,
        "command": seen.command,
        "cwd": seen.cwd,
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
        "instrumented": any(e["event"] == "watch_hooked" for e in seen.events),
        "tune_change": seen.tune_change,
        "applied": {e["change"]: e["detail"] for e in seen.events if e["event"] == "watch_applied"},
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


def summary(events: list[dict]) -> dict | None:
    """A sweep trial's step timing: its main fit's steps, median step time and samples/s over the
    windows, and the shares of time waiting for input and between steps. None without a fit."""
    main = max(_fits(events), key=lambda f: f.steps, default=None)
    if main is None or not main.windows:
        return None
    timed = untraced(main.windows)
    figures = throughput_of(main, None, timed[warmup_windows(timed) :])
    return {
        "steps": main.steps,
        "batch_size": main.batch_size,
        "step_time_s": figures["step_time_s"],
        "samples_per_s": figures.get("samples_per_s"),
        "input_wait_share": figures["input_wait_share"],
        "outside_step_share": figures["outside_step_share"],
        "compile_s": main.compile_s,
        "precision_policy": main.precision_policy,
        "backend": main.backend,
        "epochs_planned": main.epochs_planned,
    }


def _fits(events: list[dict], ended_monotonic_s: float | None = None) -> list[WatchedFit]:
    """Each fit (and the custom loop) the events tell of; `ended_monotonic_s`: when the command
    ended, for a fit whose first step had not."""
    fits: dict[tuple, dict] = {}

    def fit_of(event: dict) -> dict:
        key = (event["pid"], event.get("fit"))
        return fits.setdefault(
            key,
            {
                "pid": event["pid"],
                "index": event.get("fit"),
                "custom": event.get("fit") is None,
                "windows": [],
                "epochs": [],
            },
        )

    for e in events:
        kind = e["event"]
        if kind == "watch_fit_begin" and e.get("began_monotonic_s") is not None:
            fit_of(e).update(
                began=e["began_monotonic_s"],
                batch_size=e.get("batch_size"),
                epochs_planned=e.get("epochs"),
                **{k: e[k] for k in ("shuffle", "validation", "validation_steps", "weighted") if k in e},
            )
        elif kind == "watch_fit":
            fit_of(e).update(
                {
                    k: e.get(k)
                    for k in (
                        "backend",
                        "keras_version",
                        "model",
                        "params",
                        "batch_size",
                        "batch_bytes",
                        "input_type",
                        "precision_policy",
                        "compute_dtype",
                        "jit_compile",
                        "steps_per_execution",
                        "strategy",
                        "compile_s",
                        "flops_coverage",
                        "steps_per_epoch",
                        "input_in_graph",
                        "input_workers",
                        "input_multiprocessing",
                        "sync_callbacks",
                        "rate_callback",
                        "optimizer",
                        "learning_rate",
                        "augmented_in_model",
                        "own_train_step",
                    )
                }
            )
            fit_of(e).update(sites={k: v for k, v in (e.get("sites") or {}).items() if v})
            fit_of(e).update(
                forward_flops_per_sample=e.get("forward_flops"),
                replicas=e.get("replicas") or 1,
                run_eagerly=bool(e.get("run_eagerly")),
                devices=e.get("devices"),
                epochs_planned=e.get("epochs"),
            )
        elif kind == "watch_window":
            fit_of(e)["windows"].append(window_of(e))
        elif kind == "watch_epoch":
            seconds = e["end_monotonic_s"] - e["start_monotonic_s"]
            fit_of(e)["epochs"].append(
                WatchEpoch(
                    epoch=e["epoch"],
                    start_monotonic_s=e["start_monotonic_s"],
                    end_monotonic_s=e["end_monotonic_s"],
                    epoch_end_monotonic_s=e.get("epoch_end_monotonic_s", e["end_monotonic_s"]),
                    steps=e["steps"],
                    samples=e["samples"],
                    samples_per_s=e["samples"] / seconds if seconds > 0 else 0.0,
                    logs={str(k): _log_value(v) for k, v in (e.get("logs") or {}).items()},
                    callbacks_s=e.get("callbacks_s") or {},
                    validation_steps=e.get("validation_steps"),
                    validation_s=e.get("validation_s"),
                    first_batch=e.get("first_batch"),
                )
            )
        elif kind == "watch_pipeline":
            fit_of(e).update(pipeline=e.get("ops") or [])
        elif kind == "watch_fit_end":
            fit_of(e).update(
                steps=e["steps"],
                samples=e["samples"],
                peak_memory_bytes=e.get("peak_memory_bytes"),
                stopped_by_limit=bool(e.get("stopped_by_limit")),
                last_loss=e.get("last_loss"),
                input_repeats=e.get("input_repeats"),
                sample_work=e.get("sample_work"),
            )
    out = []
    for fit in fits.values():
        began = fit.pop("began", None)
        if began is not None and ended_monotonic_s is not None and "compile_s" not in fit and not fit["windows"]:
            fit["first_step_unfinished_s"] = max(0.0, ended_monotonic_s - began)  # never announced: no step ended
        if fit["custom"]:  # the loop's own count of steps and samples
            fit["steps"] = sum(w.steps for w in fit["windows"])
            fit["samples"] = sum(w.samples or 0 for w in fit["windows"])
        elif "steps" not in fit and fit["windows"]:  # stopped before fit ended (Ctrl-C, a kill): what ran
            # the first step (the compile) and the windows' steps; the steps after the last window are not seen
            fit["steps"] = 1 + sum(w.steps for w in fit["windows"])
            fit["samples"] = (fit.get("batch_size") or 0) + sum(w.samples or 0 for w in fit["windows"])
        made = WatchedFit(**{k: v for k, v in fit.items() if v is not None})
        out.append(made.model_copy(update={"diverged": divergence.find(made)}))
    return out


def _log_value(value):
    """A value of an epoch event's logs as the record keeps it (child/step_outputs.log_value made it;
    an in-process watch's own logs may hold any JSON value): numbers as floats, lists of them, the
    text of anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return [_log_value(v) for v in value]
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _fit_notes(main: WatchedFit | None) -> list[str]:
    if main is None or not main.input_in_graph:
        return []
    return [
        f"input wait not measured: with steps_per_execution {main.steps_per_execution} on tensorflow, Keras "
        "reads the tf.data input inside its compiled loop, which gpuscout leaves as it is (each call's "
        "steps are counted, the epoch's last call as whole)"
    ]


def _trace(events: list[dict]) -> Trace | None:
    found = [e for e in events if e["event"] == "watch_trace"]
    if not found:
        return None
    e = found[-1]
    return Trace(
        dir=e["dir"],
        first_step=e["first_step"],
        last_step=e["last_step"],
        ok=e["ok"],
        message=e.get("message"),
        command=f"tensorboard --logdir {e['dir']}" if e["ok"] else None,
        devices=e.get("devices") or [],
        kernels_note=e.get("kernels_note"),
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


def _telemetry(seen: Observed, windows: list[WatchWindow]) -> dict:
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
