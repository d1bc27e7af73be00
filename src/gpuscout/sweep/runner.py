"""Running a sweep's trials: one child process per trial (its own process group, a timeout, its
log files), a queue that keeps every slot busy, retries, the consecutive-failure stop, resume.

Slots are GPUs (each `trials_per_gpu` times) or, with `--cpu-slots N`, N CPU slots. Trial
threads only run children and hand results to the driver thread through a queue; the driver
alone writes the store and the display, so nothing races on SQLite or the terminal.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from gpuscout import engine
from gpuscout.analysis import watch as watch_analysis
from gpuscout.executor import process
from gpuscout.executor.local import STDERR_TAIL_CHARS
from gpuscout.failures import classify_failure
from gpuscout.record.run import RunRecord
from gpuscout.sweep import TRIAL_FILE_ENV, workload_trials
from gpuscout.sweep.spec import SweepFile, Trial, argv_for
from gpuscout.watch.command import Instrumentation


@dataclass(frozen=True)
class Slot:
    label: str  # gpu0, gpu0#2, cpu1
    gpu_index: int | None


@dataclass
class TrialResult:
    key: str
    index: int
    params: dict
    status: str  # ok | failed | oom | timeout
    attempts: int
    slot: str
    gpu_index: int | None
    started_monotonic_s: float
    ended_monotonic_s: float
    duration_s: float
    metrics: dict = field(default_factory=dict)  # the last value reported of each metric
    history: list[dict] = field(default_factory=list)  # every report, in order
    message: str | None = None
    log_dir: str | None = None
    telemetry: dict | None = None
    run_id: str | None = None  # workload sweeps: the stored benchmark run
    steps: dict | None = None  # command trials: steps, step time, samples/s, input wait of the main fit
    # workload sweeps: every attempt's record, for the driver to store (not part of the trial's row)
    records: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "records"}


def slots_for(gpus: list[int] | None, cpu_slots: int | None, per_gpu: int) -> list[Slot]:
    if cpu_slots:
        return [Slot(f"cpu{i}", None) for i in range(cpu_slots)]
    return [Slot(f"gpu{g}" + (f"#{k + 1}" if per_gpu > 1 else ""), g) for g in gpus for k in range(per_gpu)]


def trial_env(slot: Slot, trial_file: Path, params: dict) -> dict:
    env = dict(os.environ)
    env[TRIAL_FILE_ENV] = str(trial_file)
    env["GPUSCOUT_TRIAL_PARAMS"] = json.dumps(params, default=str)
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = "" if slot.gpu_index is None else str(slot.gpu_index)
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # memory growth on, as the sweep file promises
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def read_metrics(stdout_text: str, trial_file: Path, events: list[dict] = ()) -> tuple[dict, list[dict]]:
    """(last value of each metric, the reports in order) from a command trial. What the script
    reports itself (JSON lines on stdout, gpuscout.sweep.report's file) is its history; a script
    that reports nothing has Keras fit's epoch logs (the instrumentation's events) as its
    history. The metrics are fit's last logs, overridden by what the script reported."""
    reported: list[dict] = []
    for line in stdout_text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                reported.append({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    if trial_file.exists():
        for line in trial_file.read_text(encoding="utf-8").splitlines():
            try:
                reported.append(json.loads(line))
            except ValueError:
                continue
    from_fit = [{"epoch": e["epoch"], **e["logs"]} for e in events if e.get("event") == "watch_epoch"]
    metrics: dict = {}
    for entry in from_fit + reported:
        metrics.update({k: v for k, v in entry.items() if k not in ("time", "step", "epoch")})
    return metrics, reported or from_fit


@dataclass
class Attempt:
    status: str  # ok | failed | oom | timeout | interrupted
    message: str | None = None
    metrics: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    telemetry: dict | None = None
    record: RunRecord | None = None  # workload sweeps
    steps: dict | None = None  # command trials: the main fit's step timing (analysis/watch.summary)


class TrialRunner:
    """Runs attempts of one trial on one slot; `kill_all` (Ctrl-C) stops every running trial.
    A command trial runs the user's command (executor/process.py); a workload trial is a benchmark
    run measured by the engine (sweep/workload_trials.py: `specs` and `session` are its)."""

    def __init__(self, sweep: SweepFile, log_root: Path, sampler_factory=None, specs: dict | None = None,
                 session: engine.Session | None = None) -> None:
        self.sweep, self.log_root = sweep, log_root
        self.sampler_factory = sampler_factory  # (gpu_index) -> started Sampler, or None
        self.specs, self.session = specs or {}, session
        self.abort = threading.Event()  # every running trial's process group is stopped when set
        self.instrumentation = Instrumentation()  # `close()` removes its folder

    def close(self) -> None:
        self.instrumentation.close()

    def run(self, trial: Trial, slot: Slot, stop: threading.Event) -> TrialResult:
        started = time.monotonic()
        log_dir = self.log_root / f"trial-{trial.index:04d}-{trial.key}"
        attempts, last, records = 0, Attempt("failed"), []
        log_dir.mkdir(parents=True, exist_ok=True)
        earlier = len(list(log_dir.glob("stdout-*.log")))  # a resumed or retried trial's logs stay apart
        while attempts <= self.sweep.retries and not stop.is_set():
            attempts += 1
            last = (self._command(trial, slot, log_dir, earlier + attempts) if self.sweep.command is not None
                    else self._workload(trial, slot))
            records += [last.record] if last.record else []
            if last.status in ("ok", "interrupted"):
                break
        ended = time.monotonic()
        return TrialResult(trial.key, trial.index, trial.params, last.status, attempts, slot.label, slot.gpu_index,
                           started, ended, ended - started, last.metrics, last.history, last.message, str(log_dir),
                           last.telemetry, last.record.id if last.record else None, last.steps, records)

    def _command(self, trial: Trial, slot: Slot, log_dir: Path, attempt: int) -> Attempt:
        """The user's command, instrumented as `gpuscout watch` instruments it: fit's epoch logs are
        reports (no edit to the script), and the steps' timing is the trial's summary."""
        trial_file = log_dir / f"reports-{attempt}.jsonl"
        argv = argv_for(self.sweep, trial.params)
        sampler = self.sampler_factory(slot.gpu_index) if self.sampler_factory and slot.gpu_index is not None else None
        out_path, err_path = log_dir / f"stdout-{attempt}.log", log_dir / f"stderr-{attempt}.log"
        env = self.instrumentation.env(trial_env(slot, trial_file, trial.params), {"GPUSCOUT_WATCH_WINDOW_S": "1"})
        with open(out_path, "w") as out, open(err_path, "w") as err:
            try:
                finished = process.run(argv, env=env, timeout_s=self.sweep.timeout_s, stdout=out, stderr=err,
                                       cancel=self.abort)
            except OSError as exc:
                if sampler:
                    sampler.stop()
                return Attempt("failed", f"cannot start {argv[0]!r}: {exc.strerror}")
        samples = sampler.stop() if sampler else []
        tail = err_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
        metrics, history = read_metrics(out_path.read_text(errors="replace"), trial_file, finished.events)
        telemetry = _telemetry_summary(samples) if samples else None
        steps = watch_analysis.summary(finished.events)
        if finished.cancelled:
            return Attempt("interrupted", "stopped by the driver", metrics, history, telemetry, steps=steps)
        if finished.timed_out:
            return Attempt("timeout", f"exceeded the {self.sweep.timeout_s:g} s trial timeout and was killed",
                           metrics, history, telemetry, steps=steps)
        if finished.returncode != 0:
            last_line = (tail.strip().splitlines() or ["(no stderr)"])[-1][:300]
            return Attempt(classify_failure(tail), f"exited with code {finished.returncode}: {last_line}",
                           metrics, history, telemetry, steps=steps)
        if self.sweep.metric.name not in metrics:
            seen = ", ".join(sorted(metrics)) or "nothing"
            return Attempt("failed", f"finished without reporting {self.sweep.metric.name!r} (it reported {seen}; "
                                     "fit's logs, JSON lines on stdout and gpuscout.sweep.report count)",
                           metrics, history, telemetry, steps=steps)
        return Attempt("ok", None, metrics, history, telemetry, steps=steps)

    def _workload(self, trial: Trial, slot: Slot) -> Attempt:
        record = workload_trials.measure(workload_trials.on_slot(self.specs[trial.key], slot.gpu_index),
                                         self.session, self.abort)
        metrics = workload_trials.metrics(record)
        telemetry = ({"samples": record.telemetry.sample_count, "gpu_util_mean_pct": record.telemetry.gpu_util_mean_pct,
                      "power_mean_w": record.telemetry.power_mean_w,
                      "memory_used_max_bytes": record.telemetry.memory_used_max_bytes} if record.telemetry else None)
        status = "interrupted" if self.abort.is_set() else record.status
        return Attempt(status, record.error.message if record.error else None, metrics, [metrics], telemetry, record)

    def kill_all(self) -> None:
        self.abort.set()


def _telemetry_summary(samples) -> dict:
    util = [s.gpu_util_pct for s in samples if s.gpu_util_pct is not None]
    power = [s.power_w for s in samples if s.power_w is not None]
    memory = [s.memory_used_bytes for s in samples if s.memory_used_bytes is not None]
    return {"samples": len(samples), "gpu_util_mean_pct": statistics.mean(util) if util else None,
            "power_mean_w": statistics.mean(power) if power else None,
            "memory_used_max_bytes": max(memory) if memory else None}


def run_local(trials: list[Trial], slots: list[Slot], runner: TrialRunner, max_consecutive_failures: int,
              on_start: Callable[[Trial, Slot], None], on_result: Callable[[TrialResult], None]) -> str | None:
    """Run `trials` over `slots`; returns why the sweep stopped early, or None. The calling thread
    is the driver: callbacks run on it. Ctrl-C kills every running trial's process group."""
    pending: queue.Queue = queue.Queue()
    for t in trials:
        pending.put(t)
    events: queue.Queue = queue.Queue()
    stop = threading.Event()

    def work(slot: Slot) -> None:
        while not stop.is_set():
            try:
                trial = pending.get_nowait()
            except queue.Empty:
                return
            events.put(("start", trial, slot))
            handled = threading.Event()  # the driver has counted this result: only then take another
            events.put(("result", (runner.run(trial, slot, stop), handled), slot))
            handled.wait()

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    consecutive, reason = 0, None
    try:
        while any(t.is_alive() for t in threads) or not events.empty():
            try:
                kind, payload, slot = events.get(timeout=0.2)
            except queue.Empty:
                continue
            if kind == "start":
                on_start(payload, slot)
                continue
            result, handled = payload
            try:
                on_result(result)
                if result.status == "interrupted":
                    continue
                consecutive = 0 if result.status == "ok" else consecutive + 1
                if consecutive >= max_consecutive_failures and not stop.is_set():
                    reason = (f"{consecutive} trials failed in a row (the last: {result.message}); stopped as "
                              f"max_consecutive_failures = {max_consecutive_failures} asks")
                    stop.set()
            finally:
                handled.set()
    except KeyboardInterrupt:
        stop.set()
        runner.kill_all()
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            try:  # release threads waiting for their result to be handled
                kind, payload, slot = events.get(timeout=0.1)
            except queue.Empty:
                continue
            if kind == "result":
                on_result(payload[0])
                payload[1].set()
        while not events.empty():
            kind, payload, slot = events.get()
            if kind == "result":
                on_result(payload[0])
                payload[1].set()
        raise
    return reason

