"""What a stored run says to an experiment tracker: its parameters (the configuration that was
measured), its metrics (the figures, units in their names) and its tags (the store's id, the
verdict), independent of the tracker (tracking/mlflow_runs.py sends them).

Every metric is named under `gpuscout/`: MLflow's own system metrics are `system/...`
(`mlflow.log_system_metrics`, through pynvml every 10 s) and a script's are its own names
(`loss`, `val_accuracy`); ours never collide with either (issue 63), and MLflow's UI groups them
by that prefix. A figure the run does not have is left out, never logged as 0.

A metric's history ends on the run's figure: MLflow's run table and compare view show a metric's
latest step, and a history that ended elsewhere showed the last window (issue 78: 552.8 where
the run measured another figure). `gpuscout/samples_per_s` is the run's headline, the figure the
terminal shows (a watched run's whole epochs where it ran them, issue 87): its history is a
benchmark's windows, or a watched run's steady epochs, then the figure.
`gpuscout/windows_samples_per_s` is a watched run's windows, then their median: the steps alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout.analysis.epoch_clock import rate_ci95
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord
from gpuscout.record.trial import StoredTrial, TrialOutcome
from gpuscout.record.watch import WatchRecord

PREFIX = "gpuscout/"
TAG = "gpuscout."  # tags: gpuscout.run_id, gpuscout.kind, gpuscout.verdict, ...
# MLflow limits a param value to 6,000 characters and a tag value to 8,000 (mlflow/utils/validation.py,
# MAX_PARAM_VAL_LENGTH and MAX_TAG_VAL_LENGTH in 3.x): a longer command is cut, with a mark
PARAM_CHARS = 6000
SAMPLES_PER_S = f"{PREFIX}samples_per_s"
WINDOWS_SAMPLES_PER_S = f"{PREFIX}windows_samples_per_s"
TAG_CHARS = 8000


@dataclass
class Logged:
    """One tracker run's content. `series`: a metric over steps (window by window, epoch by
    epoch), name -> its value at each step (None: none at that step)."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # path in the run -> text
    run_id: str | None = None  # the store's run this is, where it is one


def of_record(record: StoredRecord) -> Logged:
    """A stored run (a benchmark's or a watched script's) as one tracker run."""
    common = _common(record)
    mine = _watch(record) if isinstance(record, WatchRecord) else _benchmark(record)
    for key in ("params", "metrics", "series", "tags"):
        getattr(common, key).update(getattr(mine, key))
    # params named as tags are: a script's own run (autolog's batch_size, epochs) may hold the same
    # names, and MLflow refuses a param logged twice with another value
    common.params = {f"{TAG}{k}": _cut(v, PARAM_CHARS) for k, v in common.params.items() if v is not None}
    common.tags = {k: _cut(v, TAG_CHARS) for k, v in common.tags.items() if v is not None}
    common.metrics = {k: float(v) for k, v in common.metrics.items() if v is not None}
    for name in (SAMPLES_PER_S, WINDOWS_SAMPLES_PER_S):  # the figure last: what the run table shows
        if common.series.get(name):  # a history of none is none
            figure = common.metrics.get(name)
            common.series[name] = [*common.series[name], figure] if figure is not None else []
    common.series = {k: v for k, v in common.series.items() if v}
    return common


def _common(record: StoredRecord) -> Logged:
    t = record.telemetry
    throughput = record.throughput
    return Logged(
        name=f"{record.workload} ({record.id})",
        run_id=record.id,
        params={"workload": record.workload, "device": record.gpu_label, "batch_size": _text(record.batch_size)},
        metrics={
            f"{PREFIX}samples_per_s": record.samples_per_s,
            f"{PREFIX}samples_per_s_ci95_low": _per_sample(record, throughput and throughput.ci95_low),
            f"{PREFIX}samples_per_s_ci95_high": _per_sample(record, throughput and throughput.ci95_high),
            f"{PREFIX}step_time_s": record.step_time_s,
            f"{PREFIX}input_wait_share": record.input_wait_share,
            f"{PREFIX}gpu_busy_pct": t.gpu_util_mean_pct if t else None,
            f"{PREFIX}power_mean_w": t.power_mean_w if t else None,
            f"{PREFIX}gpu_memory_max_bytes": t.memory_used_max_bytes if t else None,
            f"{PREFIX}mfu": record.mfu,
            f"{PREFIX}achieved_tflops": record.achieved_tflops,
            f"{PREFIX}duration_s": record.duration_s,
        },
        tags={
            f"{TAG}run_id": record.id,
            f"{TAG}kind": record.kind,
            f"{TAG}group_id": record.group_id,
            f"{TAG}status": record.status,
            f"{TAG}version": record.gpuscout_version,
            f"{TAG}methodology_version": str(record.methodology_version),
        },
    )


def _watch(record: WatchRecord) -> Logged:
    main = record.main
    first = record.verdict[0] if record.verdict else None
    return Logged(
        name="",
        params={
            "command": " ".join(record.command),
            "backend": main.backend if main else None,
            "keras_version": main.keras_version if main else None,
            "limit": record.limit,
            "tune_change": record.tune_change,
            **{f"tune.{k}": v for k, v in record.applied.items()},
        },
        metrics={
            f"{PREFIX}outside_step_share": record.outside_step_share,
            f"{PREFIX}gpu_idle_share": record.gpu_idle_share,
            f"{PREFIX}startup_s": record.startup_s,
            WINDOWS_SAMPLES_PER_S: record.windows_samples_per_s,
            **_headline_interval(record),
        },
        series={
            SAMPLES_PER_S: [e.samples_per_s for e in record.clock.steady]
            if record.clock and record.by_epochs
            else record.window_rates(),
            WINDOWS_SAMPLES_PER_S: record.window_rates(),
        },
        tags={
            f"{TAG}verdict": f"{first.code}: {first.message}" if first else "no cause found",
        },
    )


def _benchmark(record: RunRecord) -> Logged:
    cost = record.cost
    return Logged(
        name="",
        params={
            "backend": record.backend.value,
            "precision": record.precision.value,
            "xla": _text(record.xla),
            "mode": record.mode,
            "data": record.data.value,
            "devices": _text(record.devices),
            "seq_len": _text(record.seq_len),
            "unit": record.unit,
        },
        metrics={
            f"{PREFIX}peak_memory_bytes": record.peak_memory_bytes,
            f"{PREFIX}compile_s": record.compile_s,
            f"{PREFIX}usd_per_hour": cost.hourly.usd_per_hour if cost else None,
            f"{PREFIX}usd_per_million_units": cost.usd_per_million_units if cost else None,
        },
        # each window's throughput over samples: a token workload's windows count tokens
        series={SAMPLES_PER_S: [w.throughput / record.units_per_sample for w in record.windows]},
        tags={f"{TAG}flags": ", ".join(f.code for f in record.flags) or None},
    )


def _headline_interval(record: WatchRecord) -> dict[str, float | None]:
    """The 95% interval of a watched run's headline where it is its whole epochs' (their bootstrap,
    analysis/epoch_clock.py; none from one epoch), replacing the windows' one _common logged."""
    if record.clock is None or not record.by_epochs:
        return {}
    low, high = rate_ci95(record.clock)
    return {f"{PREFIX}samples_per_s_ci95_low": low, f"{PREFIX}samples_per_s_ci95_high": high}


def _per_sample(record: StoredRecord, value: float | None) -> float | None:
    """A throughput in the record's unit (tokens/s for token workloads) as samples/s."""
    return None if value is None else value / record.units_per_sample


def _text(value) -> str | None:
    return None if value is None else str(value)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def of_trial(sweep: str, trial: StoredTrial, record: StoredRecord | None = None) -> Logged:
    """A sweep's trial, as the store holds it (`trials` row: params, status, result), with its
    stored run's figures where it has one (a workload sweep's). The trial's hyperparameters and
    the metrics it reported are the user's own names, logged as they are; every report over the
    epochs is a series (step = the report's number)."""
    result = trial.result or TrialOutcome(key=trial.key, index=trial.index, status=trial.status)
    logged = of_record(record) if record is not None else Logged(name="")
    logged.name = f"{sweep} trial {trial.index}"
    logged.run_id = trial_id(sweep, trial.key)
    logged.params.update({str(k): _cut(str(v), PARAM_CHARS) for k, v in trial.params.items()})
    logged.metrics.update({str(k): float(v) for k, v in result.metrics.items() if _number(v)})
    steps = result.steps.model_dump() if result.steps else {}
    for name in ("samples_per_s", "step_time_s", "input_wait_share"):
        if _number(steps.get(name)):
            logged.metrics[f"{PREFIX}{name}"] = float(steps[name])
    if trial.result and _number(result.duration_s):
        logged.metrics[f"{PREFIX}duration_s"] = float(result.duration_s)
    history = result.history
    names = dict.fromkeys(k for r in history for k, v in r.items() if _number(v) and k not in ("epoch", "step"))
    for name in names:  # step i is the i-th report; a report without the metric leaves a gap
        logged.series[str(name)] = [float(r[name]) if _number(r.get(name)) else None for r in history]
    logged.tags.update(
        {
            f"{TAG}sweep": sweep,
            f"{TAG}trial": str(trial.index),
            f"{TAG}trial_status": trial.status,
            f"{TAG}slot": result.slot,
            f"{TAG}attempts": str(result.attempts) if trial.result else "",
        }
    )
    if result.message:
        logged.tags[f"{TAG}message"] = _cut(result.message, TAG_CHARS)
    return logged


def trial_id(sweep: str, key: str) -> str:
    """A trial's name in the store's links (tracked_runs.run_id): trials are rows of their own."""
    return f"trial:{sweep}:{key}"


def _number(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )
