"""Running one trial of a sweep: its attempts (retries), each a child process (its own process
group, a timeout, its log files) or a benchmark run, its environment, and a trial taken from its
files after its driver died (resume). sweep/schedule.py keeps every slot busy with them.

Slots are GPUs (each `trials_per_gpu` times) or, with `--cpu-slots N`, N CPU slots.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from gpuscout.core import decisions as decisions_lib
from gpuscout.core import events, outputs, watch_events
from gpuscout.core.errors import UsageError
from gpuscout.core.units import reading
from gpuscout.core.watch_events import EpochEnded, Exiting, FitAnnounced, SweepReport
from gpuscout.executor import process, warm
from gpuscout.measure import engine
from gpuscout.measure.command import EXITING_EVENT, Instrumentation, after_lingering, compilation_cache_env
from gpuscout.record.run import RunRecord
from gpuscout.record.trial import TrialMetric, TrialOutcome, TrialTelemetry
from gpuscout.sweep import TRIAL_FILE_ENV, workload_trials
from gpuscout.sweep.attempts import Attempt, AttemptFiles, judge, ours
from gpuscout.sweep.expansion import Trial, argv_for
from gpuscout.sweep.spec import Metric, SweepFile, number


@dataclass(frozen=True)
class Slot:
    label: str  # gpu0, gpu0#2, cpu1
    gpu_index: int | None


class TrialResult(TrialOutcome):
    """A trial as it ends here: its outcome (what the store keeps of it), and for workload sweeps
    every attempt's record, for the driver to store in the same transaction (not in the row)."""

    records: list[RunRecord] = Field(default_factory=list, exclude=True, repr=False)

    def outcome(self, metric: Metric) -> TrialOutcome:
        """The trial as the store keeps it: all but its records, with the sweep's metric."""
        return TrialOutcome.model_validate(
            self.model_dump() | {"metric": TrialMetric(name=metric.name, direction=metric.direction)}
        )


# How often a trial's printed JSON lines are read for the pruner (early_stop)
LINES_POLL_S = 0.2


def _json_line(line: str) -> dict | None:
    line = line.strip()
    if not (line.startswith("{") and line.endswith("}")):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def slots_for(gpus: list[int] | None, cpu_slots: int | None, per_gpu: int) -> list[Slot]:
    if cpu_slots:
        return [Slot(f"cpu{i}", None) for i in range(cpu_slots)]
    return [Slot(f"gpu{g}" + (f"#{k + 1}" if per_gpu > 1 else ""), g) for g in gpus for k in range(per_gpu)]


# What differs between a sweep's trials in their environment: read once a trial runs, never while
# the warm interpreter imports the frameworks (executor/warm.py)
PER_TRIAL_ENV = frozenset({TRIAL_FILE_ENV, "GPUSCOUT_TRIAL_PARAMS", "CUDA_VISIBLE_DEVICES"}) | {
    events.TRIAL_DONE_ENV,
    decisions_lib.DECISIONS_ENV,
}


def trial_env(slot: Slot, trial_file: Path, params: dict, compilation_cache: Path | None = None) -> dict:
    env = dict(os.environ)
    if compilation_cache is not None:
        env.update(compilation_cache_env(compilation_cache, env))
    env[TRIAL_FILE_ENV] = str(trial_file)
    env["GPUSCOUT_TRIAL_PARAMS"] = json.dumps(params, default=str)
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = "" if slot.gpu_index is None else str(slot.gpu_index)
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # memory growth on, as the sweep file promises
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def trial_dir(log_root: Path, trial: Trial) -> Path:
    return log_root / f"trial-{trial.index:04d}-{trial.key}"


class TrialRunner:
    """Runs attempts of one trial on one slot; `kill_all` (Ctrl-C) stops every running trial.
    A command trial runs the user's command (executor/process.py); a workload trial is a benchmark
    run measured by the engine (sweep/workload_trials.py: `specs` and `session` are its)."""

    def __init__(
        self,
        sweep: SweepFile,
        log_root: Path,
        sampler_factory=None,
        specs: dict | None = None,
        session: engine.Session | None = None,
        on_spawn: Callable[[Trial, int], None] = lambda trial, pgid: None,
        search=None,
        warm_start: bool = True,
        cache: Path | None = None,  # jax's persistent compilation cache (sweep/resume_plan.cache_folder)
    ) -> None:
        self.sweep, self.log_root = sweep, log_root
        self.search = search  # sweep/search.py: the pruner hears each epoch (early_stop)
        self.sampler_factory = sampler_factory  # (gpu_index) -> started Sampler, or None
        self.specs, self.session = specs or {}, session
        self.on_spawn = on_spawn  # a command trial's process group, for its lease
        self.abort = threading.Event()  # every running trial's process group is stopped when set
        self.instrumentation = Instrumentation()  # `close()` removes its folder
        self.cache = cache if sweep.compilation_cache else None
        # one runner for the sweep's trials (warm_start=False: a Ray task's runner serves one trial)
        self.warm = warm.WarmStarts(log_root, PER_TRIAL_ENV.__contains__) if sweep.warm_start and warm_start else None

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
        self.instrumentation.close()

    def run(self, trial: Trial, slot: Slot, stop: threading.Event) -> TrialResult:
        started = time.monotonic()
        log_dir = trial_dir(self.log_root, trial)
        attempts, last, records = 0, Attempt("interrupted", "stopped before it started"), []
        while attempts <= self.sweep.retries and not stop.is_set():
            attempts += 1
            try:
                outputs.own_folder(log_dir, None, "a trial's folder")
                # each attempt's files apart, numbered after any a resumed or retried trial left
                last = (
                    self._command(trial, slot, AttemptFiles.next_in(log_dir))
                    if self.sweep.command is not None
                    else self._workload(trial, slot)
                )
            except (OSError, UsageError) as exc:  # its folder or logs could not be made or written
                last = ours(f"gpuscout could not write its files ({getattr(exc, 'strerror', None) or exc})")
            records += [last.record] if last.record else []
            if last.status in ("ok", "interrupted", "pruned"):
                break
        ended = time.monotonic()
        return TrialResult(
            key=trial.key,
            index=trial.index,
            params=trial.params,
            status=last.status,
            attempts=attempts,
            slot=slot.label,
            gpu_index=slot.gpu_index,
            started_monotonic_s=started,
            ended_monotonic_s=ended,
            duration_s=ended - started,
            metrics=last.metrics,
            history=last.history,
            message=last.message,
            log_dir=str(log_dir),
            telemetry=last.telemetry,
            run_id=last.record.id if last.record else None,
            steps=last.steps,
            records=records,
            explanations=last.explanations,
            command=argv_for(self.sweep, trial.params) if self.sweep.command is not None else None,
            ours=last.ours,
            warm=last.warm,
        )

    def _command(self, trial: Trial, slot: Slot, files: AttemptFiles) -> Attempt:
        """The user's command, instrumented as `gpuscout watch` instruments it: fit's epoch logs are
        reports (no edit to the script), and the steps' timing is the trial's summary."""
        argv = argv_for(self.sweep, trial.params)
        sampler = self.sampler_factory(slot.gpu_index) if self.sampler_factory and slot.gpu_index is not None else None
        extra = {"GPUSCOUT_WATCH_WINDOW_S": "1", events.TRIAL_DONE_ENV: str(files.done)}
        decisions, stopped, planned = None, {}, {}  # stopped: epoch -> the verdict given
        if self.search is not None and self.search.prunes:  # fit waits at each epoch's end for the verdict
            decisions = files.folder / f"decisions-{files.number}"
            outputs.own_folder(decisions, None, "a trial's decisions folder")
            extra[decisions_lib.DECISIONS_ENV] = str(decisions)

        lost: list[OSError] = []  # events that could not be kept: what the trial reported is then not known

        def on_event(raw: dict) -> None:
            try:
                files.record_event(raw)
            except OSError as exc:
                lost.append(exc)
            event = watch_events.decode(raw)
            if isinstance(event, FitAnnounced):
                planned[event.fit] = event.epochs
            elif decisions is not None and isinstance(event, EpochEnded):
                key = f"{event.fit}-{event.epoch}"
                self._decide(trial, event.logs, event.epoch, decisions, key, stopped, planned.get(event.fit))
            elif decisions is not None and isinstance(event, SweepReport):  # gpuscout.sweep.report
                self._decide(trial, event.metrics, event.step, decisions, f"report-{event.step}", stopped, None)

        env = self.instrumentation.env(trial_env(slot, files.reports, trial.params, self.cache), extra)
        started_warm = self.warm.starter(argv, env) if self.warm is not None else None
        prune_now = threading.Event()  # a script that prints its reports as JSON lines is stopped
        lines = (
            None
            if decisions is None
            else threading.Thread(
                target=self._follow_lines, args=(trial, files.stdout, decisions, stopped, prune_now), daemon=True
            )
        )
        with files.open_log("stdout") as out, files.open_log("stderr") as err:
            files.reserve()  # an OSError (no room even now) is gpuscout's: run() says so
            try:
                if lines is not None:
                    lines.start()
                finished = process.run(
                    argv,
                    env=env,
                    timeout_s=self.sweep.timeout_s,
                    stdout=out,
                    stderr=err,
                    cancel=self.abort,
                    on_event=on_event,
                    status_file=files.exit,
                    on_start=lambda pgid: self.on_spawn(trial, pgid),
                    stop_now=prune_now if lines is not None else None,
                    last_events=(EXITING_EVENT,),
                    start=started_warm,
                )
            except OSError as exc:
                if sampler:
                    sampler.stop()
                return Attempt("failed", f"cannot start {argv[0]!r}: {exc.strerror}")
        samples = sampler.stop() if sampler else []
        if started_warm is not None and started_warm.lost:  # not its failure: again, cold (a new attempt)
            return self._command(trial, slot, AttemptFiles.next_in(files.folder))
        told = watch_events.decode_all(finished.events)
        if started_warm is not None:  # what it imported besides, the next trials find imported
            exiting = next((e for e in told if isinstance(e, Exiting)), None)
            started_warm.learn(exiting.frameworks if exiting else [])
        returncode, lingered_note, cancelled = finished.returncode, None, finished.cancelled
        code_done = files.code_done() if cancelled else None
        if finished.lingered:  # all its code ran, then its interpreter did not exit: judged by what it did
            code, lingered_note = after_lingering(told)
            returncode = 0 if code is None else code
        elif code_done is not None and not prune_now.is_set():
            # stopped with its driver (Ctrl-C, SIGTERM) after all its code had run: it finished
            returncode, lingered_note, cancelled = code_done, files.done_note(), False
        attempt = judge(
            self.sweep,
            files,
            returncode,
            timed_out=finished.timed_out,
            cancelled=cancelled,
            telemetry=_telemetry_summary(samples, sampler.gpu_name) if samples else None,
        )
        attempt.warm = bool(started_warm and started_warm.used)
        if lingered_note and attempt.message is None:
            attempt.message = lingered_note
        # judged on events gpuscout could not keep: said so, unless the judgement is gpuscout's already
        # (a full disk where both the trial's output and its events are written: whichever writer met
        # it first decided the message, and a fresh-clone CI read "could not keep its events" where
        # the test, and the other order, said "stopped on a full disk")
        if lost and attempt.status not in ("ok", "pruned") and not attempt.ours:
            return ours(f"gpuscout could not keep its events ({lost[0].strerror or lost[0]})")
        stopped_by_us = finished.cancelled and prune_now.is_set() and not self.abort.is_set()
        prune_now.set()  # the line follower ends with the trial
        pruned_at = [epoch for epoch, stop in stopped.items() if stop]
        if pruned_at and (attempt.status == "ok" or stopped_by_us):  # stopped by the pruner, not failed
            attempt.status = "pruned"
            why = self.search.why.get(trial.key) if self.search is not None else None
            attempt.message = f"pruned after epoch {pruned_at[0]}: " + (
                why
                or f"{self.sweep.metric.name} {reading(attempt.metrics.get(self.sweep.metric.name, float('nan')))} "
                f"ranked too low ({self.sweep.early_stop.kind})"
            )
        return attempt

    def _follow_lines(
        self, trial: Trial, stdout: Path, decisions: Path, stopped: dict, prune_now: threading.Event
    ) -> None:
        """JSON lines the script prints with a "step" or "epoch": the pruner hears each, and a trial
        it stops is ended (such a script has no call to hear the verdict through)."""
        offset, partial = 0, ""
        while not prune_now.is_set():
            time.sleep(LINES_POLL_S)
            try:
                with open(stdout, encoding="utf-8", errors="replace") as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset = f.tell()
            except FileNotFoundError:
                continue
            *complete, partial = (partial + chunk).split("\n")
            for line in complete:
                entry = _json_line(line)
                step = entry.get("step", entry.get("epoch")) if entry else None
                if isinstance(step, int) and self.sweep.metric.name in entry:
                    self._decide(trial, entry, step, decisions, f"line-{step}", stopped, None)
                    if stopped.get(step):
                        prune_now.set()

    def _decide(
        self, trial: Trial, metrics: dict, epoch: int, decisions: Path, name: str, stopped: dict, planned: int | None
    ) -> None:
        """The pruner's verdict at one epoch, written where the trial waits for it (`name`): `stop`
        (fit's model.stop_training, or report() returning True, so the script's own code after
        training still runs) or `go`. An epoch heard twice (fit's logs and the script's report)
        gets the first verdict; the last epoch fit planned is reported but never pruned: the
        trial has finished."""
        if epoch not in stopped:
            value = number(metrics.get(self.sweep.metric.name))  # a text or a vector: nothing to judge by
            stop = (
                value is not None
                and not any(stopped.values())
                and self.search.report(trial.key, epoch, value)
                and epoch != planned
            )
            if value is not None:
                stopped[epoch] = bool(stop)
        decisions_lib.write(decisions, name, stopped.get(epoch, False))

    def _workload(self, trial: Trial, slot: Slot) -> Attempt:
        record = workload_trials.measure(
            workload_trials.on_slot(self.specs[trial.key], slot.gpu_index, self.cache), self.session, self.abort
        )
        metrics = workload_trials.metrics(record)
        telemetry = (
            TrialTelemetry(
                samples=record.telemetry.sample_count,
                gpu_util_mean_pct=record.telemetry.gpu_util_mean_pct,
                power_mean_w=record.telemetry.power_mean_w,
                memory_used_max_bytes=record.telemetry.memory_used_max_bytes,
            )
            if record.telemetry
            else None
        )
        status = "interrupted" if self.abort.is_set() else record.status
        return Attempt(
            status,
            record.error.message if record.error else None,
            metrics,
            [metrics],
            telemetry,
            record,
            explanations=[e.model_dump() for e in record.error.explanations] if record.error else [],
        )

    def kill_all(self) -> None:
        self.abort.set()


def _telemetry_summary(samples, gpu_name: str | None = None) -> TrialTelemetry:
    util = [s.gpu_util_pct for s in samples if s.gpu_util_pct is not None]
    power = [s.power_w for s in samples if s.power_w is not None]
    memory = [s.memory_used_bytes for s in samples if s.memory_used_bytes is not None]
    return TrialTelemetry(
        samples=len(samples),
        gpu_name=gpu_name,
        gpu_util_mean_pct=statistics.mean(util) if util else None,
        power_mean_w=statistics.mean(power) if power else None,
        memory_used_max_bytes=max(memory) if memory else None,
    )
