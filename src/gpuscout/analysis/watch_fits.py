"""A watched script's fits, as the instrumentation's events tell them: each Model.fit call (and the
custom loop) with its announcement, windows, epochs and end (analysis/watch.py derives the record
from them)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gpuscout.analysis import divergence
from gpuscout.analysis.watch_windows import window_of
from gpuscout.core.watch_events import EpochEnded, FitAnnounced, FitBegan, FitEnded, Pipeline, WatchEvent, Window
from gpuscout.record.epochs import LogValue, WatchEpoch
from gpuscout.record.watch import WatchedFit


def fits_of(events: list[WatchEvent], ended_monotonic_s: float | None = None) -> list[WatchedFit]:
    """Each fit (and the custom loop) the events tell of; `ended_monotonic_s`: when the command
    ended, for a fit whose first step had not."""
    fits: dict[tuple[int, int | None], dict[str, Any]] = {}

    def fit_of(pid: int, index: int | None) -> dict[str, Any]:
        return fits.setdefault(
            (pid, index), {"pid": pid, "index": index, "custom": index is None, "windows": [], "epochs": []}
        )

    for e in events:
        if isinstance(e, FitBegan):
            fit_of(e.pid, e.fit).update(
                {k: getattr(e, k) for k in BEGUN}, began=e.began_monotonic_s, epochs_planned=e.epochs
            )
        elif isinstance(e, FitAnnounced):
            fit_of(e.pid, e.fit).update(
                {k: getattr(e, k) for k in ANNOUNCED},
                sites={k: v for k, v in e.sites.items() if v},
                forward_flops_per_sample=e.forward_flops,
                replicas=e.replicas or 1,
                epochs_planned=e.epochs,
            )
        elif isinstance(e, Window):
            fit_of(e.pid, e.fit)["windows"].append(window_of(e))
        elif isinstance(e, EpochEnded):
            seconds = e.end_monotonic_s - e.start_monotonic_s
            fit_of(e.pid, e.fit)["epochs"].append(
                WatchEpoch(
                    epoch=e.epoch,
                    start_monotonic_s=e.start_monotonic_s,
                    end_monotonic_s=e.end_monotonic_s,
                    epoch_end_monotonic_s=e.end_monotonic_s
                    if e.epoch_end_monotonic_s is None
                    else e.epoch_end_monotonic_s,
                    steps=e.steps,
                    samples=e.samples,
                    samples_per_s=e.samples / seconds if seconds > 0 else 0.0,
                    logs={k: log_value(v) for k, v in e.logs.items()},
                    callbacks_s=e.callbacks_s,
                    validation_steps=e.validation_steps,
                    validation_s=e.validation_s,
                    first_batch=e.first_batch,
                )
            )
        elif isinstance(e, Pipeline):
            fit_of(e.pid, e.fit).update(pipeline=e.ops)
        elif isinstance(e, FitEnded):
            fit_of(e.pid, e.fit).update(
                steps=e.steps,
                samples=e.samples,
                peak_memory_bytes=e.peak_memory_bytes,
                stopped_by_limit=e.stopped_by_limit,
                last_loss=e.last_loss,
                input_repeats=e.input_repeats,
                sample_work=e.sample_work,
                generator_inline=e.generator_inline,
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


def _same_named(event: type, apart: set[str]) -> tuple[str, ...]:
    """The event's fields that its fit's record keeps under the same name: each fact declared in
    the event and the record, never a third time in a copy here (issue 88: a fit's validation
    maps were declared in four files). `apart`: those the record keeps otherwise."""
    return tuple(f.name for f in dataclasses.fields(event) if f.name in WatchedFit.model_fields and f.name not in apart)


# Kept otherwise: pid keys the fit; an event's `epochs` is the count fit was asked for (the record's
# epochs_planned: its `epochs` are those run); replicas default to one; sites only where seen
BEGUN = _same_named(FitBegan, {"pid", "epochs"})
ANNOUNCED = _same_named(FitAnnounced, {"pid", "epochs", "replicas", "sites"})


def log_value(value: Any) -> LogValue:
    """A value of an epoch event's logs as the record keeps it (child/step_outputs.log_value made it;
    an in-process watch's own logs may hold any JSON value): numbers as floats, lists of them, the
    text of anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return [log_value(v) for v in value]
    return value if isinstance(value, str) else json.dumps(value, default=str)
