"""What a sweep ends with: the best trials, its summary (time, GPU-hours, idle shares, cost, what
early stopping saved) and its TensorBoard logs, from every trial's stored result."""

from __future__ import annotations

import json
import os
import sys

from gpuscout import catalog
from gpuscout.analysis import stats
from gpuscout.catalog.pricing import hourly_cost
from gpuscout.core import outputs
from gpuscout.core.errors import UsageError
from gpuscout.core.versions import __version__
from gpuscout.executor import process
from gpuscout.record.trial import TrialOutcome
from gpuscout.sweep import stopping
from gpuscout.sweep.results import Ranked, SweepSummary, TensorBoard
from gpuscout.sweep.spec import SweepFile, number, score
from gpuscout.telemetry.nvml import Nvml

# The files a sweep writes in its folder beside its trials', and how gpuscout knows its own
# (core/outputs/'s marks)
SUMMARY, TENSORBOARD_INPUT = "summary.json", "tensorboard-input.json"
OWN_FILES = {SUMMARY: ("json",), TENSORBOARD_INPUT: ("json",)}
# Writing the logs of thousands of trials takes seconds; longer means the writer hung.
TENSORBOARD_TIMEOUT_S = 600


def _better(sweep: SweepFile, a: float, b: float) -> bool:
    return a > b if sweep.metric.direction == "max" else a < b


def best_of(sweep: SweepFile, results: list[TrialOutcome], status: str = "ok") -> TrialOutcome | None:
    """The best trial of those that ended with `status` and reported the metric."""
    scored = [r for r in results if r.status == status and score(r.value(sweep.metric.name)) is not None]
    if not scored:
        return None
    best = scored[0]
    for r in scored[1:]:
        if _better(sweep, r.metrics[sweep.metric.name], best.metrics[sweep.metric.name]):
            best = r
    return best


def summarise(p, results: list[TrialOutcome], new: list[TrialOutcome], nvml: Nvml, stopped: str | None) -> SweepSummary:
    """`p`: the sweep's resume_plan.Plan (not imported: it imports this module). `results`:
    every trial of the sweep (for the ranking); `new`: those run now (for time)."""
    sweep = p.sweep
    began = min((r.started_monotonic_s for r in new), default=0.0)
    finished = max((r.ended_monotonic_s for r in new), default=0.0)
    wall = finished - began
    trial_time = sum(r.duration_s for r in new)
    ranked, timed_out = (
        sorted(
            (r for r in results if r.status == status and score(r.value(sweep.metric.name)) is not None),
            key=lambda r: r.metrics[sweep.metric.name],
            reverse=sweep.metric.direction == "max",
        )
        for status in ("ok", "timeout")
    )
    # ran to their end with a metric that is NaN or infinite: kept, said, never ranked
    diverged = [
        r.index
        for r in results
        if r.status == "ok"
        and number(r.value(sweep.metric.name)) is not None
        and score(r.metrics[sweep.metric.name]) is None
    ]
    gpu_seconds: dict[str, float] = {}
    idle: dict[str, float] = {}
    gap: dict[str, float] = {}  # no trial on the GPU while trials were left to run (the scheduler's cost)
    drain: dict[str, float] = {}  # from its last trial's end to the sweep's: no trial was left to give it
    cost_usd = 0.0
    priced = True
    for gpu in sorted({r.gpu_index for r in new if r.gpu_index is not None}):
        mine = sorted((r.started_monotonic_s, r.ended_monotonic_s) for r in new if r.gpu_index == gpu)
        busy = stats.covered_s(mine)
        gpu_seconds[f"gpu{gpu}"] = busy
        idle[f"gpu{gpu}"] = 1 - busy / wall if wall else None
        drain[f"gpu{gpu}"] = (finished - max(end for _, end in mine)) / wall if wall else None
        gap[f"gpu{gpu}"] = idle[f"gpu{gpu}"] - drain[f"gpu{gpu}"] if wall else None
        entry = catalog.match(nvml.gpu(gpu).name) if nvml.available else None
        hourly = hourly_cost(catalog.load(), entry.id, strict=False) if entry else None
        if hourly is None:
            priced = False
        else:
            cost_usd += hourly.usd_per_hour * wall / 3600  # a rented GPU costs its hours, busy or idle
    counts = {s: sum(1 for r in results if r.status == s) for s in ("ok", "pruned", "failed", "oom", "timeout")}
    return SweepSummary(
        sweep=sweep.name,
        metric=sweep.metric,
        trials=sweep.strategy.trials if sweep.strategy.kind == "tpe" else len(p.trials),
        run_now=len(new),
        skipped_done=len(p.done),
        status_counts=counts,
        stopped=stopped,
        best=[_ranked(r, sweep) for r in ranked[:5]],
        # killed at the trial timeout after reporting: what they reported last, apart from the complete ones
        timed_out=[_ranked(r, sweep) for r in timed_out],
        diverged=diverged,
        wall_s=wall,
        trial_seconds_sum=trial_time,
        parallel_speedup=trial_time / wall if wall else None,
        trials_per_hour=len(new) / wall * 3600 if wall else None,
        gpu_hours=sum(gpu_seconds.values()) / 3600,
        gpu_busy_s=gpu_seconds,
        gpu_idle_share=idle,
        gpu_gap_share=gap,
        gpu_drain_share=drain,
        cost_usd=cost_usd if gpu_seconds and priced else None,
        log_root=str(p.log_root),
        notes=p.notes,
        strategy=sweep.strategy,
        early_stop=stopping.stopping_summary(sweep, results, best_of(sweep, results)),
    )


def _ranked(r: TrialOutcome, sweep: SweepFile) -> Ranked:
    return Ranked(
        index=r.index,
        params=r.params,
        value=r.metrics[sweep.metric.name],
        epochs=len(r.history),
        duration_s=r.duration_s,
        slot=r.slot,
        log_dir=r.log_dir or "",
    )


def write_tensorboard(p, results: list[TrialOutcome], store_path, changed: bool) -> TensorBoard:
    """Each trial's reports (`p`: the resume_plan.Plan) as scalars and the sweep's HParams table,
    written by a child with tensorboardX (no TensorFlow needed; the parent imports neither). Left as they are
    when no trial ended since they were written (a resumed sweep with nothing left to run would
    otherwise spend a second starting the writer)."""
    logdir = p.log_root / "tensorboard"
    if not changed and logdir.is_dir():
        return TensorBoard(logdir=str(logdir), note=f"tensorboard --logdir {logdir}")
    try:
        payload = outputs.replace_inside(
            p.log_root,
            TENSORBOARD_INPUT,
            json.dumps(
                {
                    "gpuscout_version": __version__,
                    "metric": p.sweep.metric.name,
                    "space": list(p.sweep.space),
                    "results": [r.model_dump() for r in results],
                },
                default=str,
            ),
            store_path,
            "the sweep's file",
            OWN_FILES[TENSORBOARD_INPUT],
        )
    except (OSError, UsageError) as exc:
        return TensorBoard(logdir=None, note=f"no TensorBoard logs ({getattr(exc, 'strerror', None) or exc})")
    finished, output = process.run_captured(
        [sys.executable, "-m", "gpuscout.child.tensorboard_writer", str(payload), str(logdir)],
        env=_quiet_env(),
        timeout_s=TENSORBOARD_TIMEOUT_S,
    )
    if finished.returncode != 0:
        last = (output.strip().splitlines() or ["unknown error"])[-1]
        return TensorBoard(logdir=None, note=f"no TensorBoard logs ({last}); pip install 'gpuscout[sweep]'")
    return TensorBoard(logdir=str(logdir), note=f"tensorboard --logdir {logdir}")


def _quiet_env() -> dict:
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
