"""Watching a command to its end: start it instrumented, sample its GPUs, stop it at a limit,
derive the record and its verdict (gpuscout.analysis.watch) and store it.

The command runs in a process group of its own (executor/process.py); Ctrl-C is passed on to
it as SIGINT, so a training script ends as it would at the terminal, and what was measured up
to then is kept. `--steps`/`--duration` are enforced inside the script: after that many steps
the instrumentation sends what it measured and halts the process where it is (no validation,
no callback, no code after fit: gpuscout.child.watch_state.halt), and the group is ended at
once. A command the instrumentation cannot see (no fit, no gpuscout.watch.step) is stopped here
at --duration as a backstop, as Ctrl-C would stop it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpuscout.analysis import device_causes
from gpuscout.analysis import watch as analysis
from gpuscout.core import durations, outputs, signals, tune_settings, watch_events
from gpuscout.core.errors import UsageError
from gpuscout.core.provenance import relevant_env
from gpuscout.core.text import storable
from gpuscout.core.watch_events import (
    CustomLoopStarted,
    Exiting,
    FitAnnounced,
    FitBegan,
    Halted,
    InstrumentationFailed,
    LimitReached,
    MlflowRunSeen,
    TraceWritten,
    WatchEvent,
)
from gpuscout.executor import process
from gpuscout.measure import engine, trace_kernels
from gpuscout.measure.command import (
    EXITING_EVENT,
    Command,
    Instrumentation,
    after_lingering,
    compilation_cache_env,
    script_digest,
)
from gpuscout.measure.gpus import GpuWatch, visible_gpus
from gpuscout.measure.series import Runs
from gpuscout.measure.view import View
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store, StoreError
from gpuscout.store.tracked import TrackedRun
from gpuscout.telemetry.sampler import DEFAULT_INTERVAL_S

# After the hook said the limit was reached: time for it to send what it measured and halt
# before the script is stopped anyway (the last window waits for the step in flight).
LIMIT_GRACE_S = 30.0
# A script stopped with SIGINT gets this long to end before SIGTERM (its `finally` blocks,
# a checkpoint it writes on KeyboardInterrupt).
STOP_GRACE_S = 10.0
TAIL_BYTES = 8000

# How a run the watchdog ended begins its note (tune reads it: a baseline that never ended is no baseline)
TIMED_OUT = "killed after"


@dataclass(frozen=True)
class WatchOptions:
    steps: int | None = None  # stop watching after this many training steps
    duration_s: float | None = None  # ... or this much training time
    trace_steps: tuple[int, int] | None = None  # profiler trace of these steps (1-based, inclusive)
    window_s: float = 1.0  # seconds between the instrumentation's synchronisations
    window_steps: int | None = None  # ... or this many steps (tune: equal windows for equal steps)
    # tune: `steps` met at the end of the epoch that reaches them, so the run holds whole epochs
    whole_epochs: bool = False
    telemetry: bool = True
    telemetry_interval_s: float = DEFAULT_INTERVAL_S
    # `gpuscout tune -- COMMAND`: the change to apply inside the script (child/tune_overrides.py)
    change: str | None = None
    change_settings: dict | None = None
    # a persistent XLA compilation cache the script's jax compiles through (tune's runs share one);
    # the user's own JAX_COMPILATION_CACHE_DIR wins
    compilation_cache: Path | None = None
    # whether a PyDataset's or generator's batches repeat (child/input_repeats.py): what `cache` needs;
    # tune checks in its first baseline only (a run of a change would pay the digests for nothing)
    check_repeats: bool = True
    # whether the function a PyDataset's __getitem__ spends its time in is called again to tell what
    # it does (child/sample_work.py): tune's first baseline only; a plain watch does not call the
    # script's own code more than the script does
    tell_augmentation: bool = False
    # the name the run is listed and compared by (--label; the notebook magic's too) [default: the script's]
    label: str | None = None
    # a run that takes longer is killed, its whole process group, and recorded failed with why (tune's --timeout)
    timeout_s: float | None = None

    def settings(self, trace_dir: Path | None) -> dict[str, str]:
        """The instrumentation's environment (read by gpuscout.child.watch_hook)."""
        env = {"GPUSCOUT_WATCH_WINDOW_S": f"{self.window_s:g}"}
        if self.window_steps:
            env["GPUSCOUT_WATCH_WINDOW_STEPS"] = str(self.window_steps)
        if self.steps:
            env["GPUSCOUT_WATCH_STEPS"] = str(self.steps)
            if self.whole_epochs:
                env["GPUSCOUT_WATCH_WHOLE_EPOCHS"] = "1"
        if self.duration_s:
            env["GPUSCOUT_WATCH_SECONDS"] = f"{self.duration_s:g}"
        if self.change_settings:
            # typed and checked here, before the run: a key no applier reads is refused
            env[tune_settings.ENV] = tune_settings.TuneSettings.from_dict(self.change_settings).to_json()
        if not self.check_repeats:
            env["GPUSCOUT_WATCH_REPEATS"] = "0"
        if self.tell_augmentation:
            env["GPUSCOUT_WATCH_AUGMENTATION"] = "1"
        if self.compilation_cache is not None:
            env.update(compilation_cache_env(self.compilation_cache, dict(os.environ)))
        if self.trace_steps and trace_dir is not None:
            env["GPUSCOUT_WATCH_TRACE"] = f"{self.trace_steps[0]}:{self.trace_steps[1]}"
            env["GPUSCOUT_WATCH_TRACE_DIR"] = str(trace_dir)
        return env

    @property
    def limit(self) -> str | None:
        parts = [
            f"--steps {self.steps}" if self.steps else "",
            f"--duration {self.duration_s:g}s" if self.duration_s else "",
        ]
        return " ".join(p for p in parts if p) or None


class Limits:
    """When to stop the command: after the limited fit has ended, or at the backstop."""

    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.started = time.monotonic()
        self.first_step: float | None = None  # the parent's clock: the same monotonic clock as the child's
        self.reached: str | None = None  # why, as the hook said
        self.reached_at: float | None = None
        self.halted = threading.Event()  # the instrumentation halted the script: end its group now
        self.fit_began = False  # a fit has started: its first step (a compile of minutes) ends in its time

    def event(self, event: WatchEvent) -> None:
        if isinstance(event, FitBegan):
            self.fit_began = True
        elif isinstance(event, FitAnnounced) and self.first_step is None:
            # the child's --duration counts from the first step's end (its compile left out)
            self.first_step = (event.started_monotonic_s or time.monotonic()) + (event.compile_s or 0)
        elif isinstance(event, CustomLoopStarted) and self.first_step is None:
            self.first_step = event.start_monotonic_s
        elif isinstance(event, LimitReached) and self.reached is None:
            self.reached, self.reached_at = event.reason, time.monotonic()
        elif isinstance(event, Halted):
            self.halted.set()

    def due(self, now: float) -> bool:
        if self.reached is not None:
            return self.halted.is_set() or now - self.reached_at >= LIMIT_GRACE_S
        duration = self.options.duration_s
        if duration is None or (self.first_step is None and self.fit_began):
            return False  # an instrumented fit keeps its own limit, counted from its first step's end
        if now - (self.first_step or self.started) >= duration + LIMIT_GRACE_S:
            self.reached = f"{duration:g} s"  # the hook never said: a custom loop without watch.step(), or no fit
            return True
        return False


class _Tail:
    """The last TAIL_BYTES of the command's stderr, passed on to the view as it comes."""

    def __init__(self, view: View) -> None:
        self.view, self.data = view, bytearray()

    def __call__(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[:-TAIL_BYTES]
        self.view.stderr(chunk)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")


def watch_command(
    command: Command,
    options: WatchOptions,
    session: engine.Session,
    store: Store,
    view: View,
    runs: Runs | None = None,
) -> WatchRecord:
    """Run the command to its end (or its limit, or Ctrl-C), then store and return its record.
    `runs`: what a series of runs of the command shares (tune's session): its instrumentation,
    and a warm interpreter for each environment the runs are started under."""
    record_id = uuid.uuid4().hex[:12]
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    digest = script_digest(command, os.getcwd())  # the bytes it starts with: which script the run is of
    trace_dir = (
        outputs.own_folder(store.path.parent / "traces" / record_id, store.path, "the trace's folder")
        if options.trace_steps
        else None
    )
    nvml = session.nvml
    gpus = (
        GpuWatch(nvml, visible_gpus(nvml, dict(os.environ)), options.telemetry_interval_s)
        if options.telemetry and nvml.available
        else None
    )
    limits, tail, cancel = Limits(options), _Tail(view), threading.Event()
    seen: list[WatchEvent] = []

    def on_event(raw: dict) -> None:
        # decoded once, its text made storable (argv and messages may hold bytes that are not UTF-8)
        event = watch_events.decode(storable(raw))
        if event is None:
            return
        seen.append(event)
        limits.event(event)
        view.event(event)

    def on_start(pid: int) -> None:
        if gpus is not None:
            gpus.start(pid)
        view.started(command, pid, gpus)
        threading.Thread(target=_enforce, args=(limits, cancel), daemon=True, name="gpuscout-limits").start()

    with contextlib.nullcontext(runs.instrumentation) if runs else Instrumentation() as instrumentation:
        env = instrumentation.env(dict(os.environ), options.settings(trace_dir))
        warm = runs.starter(command, env, options.change_settings) if runs else None
        try:
            finished = process.run(
                command.argv,
                env=env,
                timeout_s=options.timeout_s,
                stdout=view.stdout(),
                stderr=tail,
                on_event=on_event,
                on_start=on_start,
                cancel=cancel,
                interrupt_first_s=STOP_GRACE_S,
                forward_interrupt=True,
                stop_now=limits.halted,
                last_events=(EXITING_EVENT,),
                start=warm,
            )
            returncode, duration_s, interrupted = finished.returncode, finished.duration_s, finished.interrupted
            lingered, timed_out = finished.lingered, finished.timed_out
        except OSError as exc:
            raise UsageError(f"cannot start {command.argv[0]!r}: {exc.strerror or exc}") from None
        except KeyboardInterrupt:  # a second Ctrl-C: the command was stopped at once
            returncode, duration_s, interrupted, lingered = None, time.monotonic() - limits.started, True, False
            timed_out = False
        finally:
            ended_monotonic_s = time.monotonic()
            cancel.set()  # ends the limits thread
            view.stopped()
    used, samples, attribution = gpus.stop() if gpus is not None else ([], [], None)
    if warm is not None and warm.lost and runs is not None:  # its warm interpreter died: gpuscout's failure
        return watch_command(command, options, session, store, view, runs.cold())
    ended = next((e for e in seen if isinstance(e, Exiting | Halted)), None)
    if runs is not None and ended is not None:  # the frameworks it imported: the next warm interpreters' too
        runs.heard(ended.frameworks)
        if warm is not None:  # and the one it forked from, for the next runs (those past the scan of its top)
            warm.learn(ended.frameworks)
    for i, event in enumerate(seen):  # each GPU's kernels in the trace, read now that the script no longer runs
        if isinstance(event, TraceWritten) and event.ok:
            devices, note = trace_kernels.read(Path(event.dir), event.last_step - event.first_step + 1)
            seen[i] = dataclasses.replace(event, devices=devices, kernels_note=note)
    notes = [attribution.note] if attribution and attribution.note else []
    if not options.change_settings and os.environ.get(
        tune_settings.ENV
    ):  # cleared for the script (Instrumentation.env)
        notes.append(
            f"{tune_settings.ENV} in your environment is tune's own setting for its runs: this plain watch ignored it"
        )
    if timed_out:  # the watchdog, not the script: said, and the run is a failed one
        notes.append(f"{TIMED_OUT} {durations.spoken(options.timeout_s or 0)} (--timeout): it had not ended")
    if lingered:  # all its code had run, then its interpreter did not exit: gpuscout stopped it
        returncode, note = after_lingering(seen)
        notes.append(note)
    status = (
        "interrupted"
        if interrupted
        else "failed"
        if timed_out
        else "stopped"
        if limits.reached
        else "ok"
        if returncode == 0 or (lingered and returncode is None)
        else "failed"
    )
    notes += [
        f"gpuscout's instrumentation failed in pid {e.pid} ({e.message}): that process trained unobserved"
        for e in seen
        if isinstance(e, InstrumentationFailed)
    ]
    # argv, the folder, the environment and what the script sent may hold bytes that are not UTF-8:
    # storable, so that the record is never lost for them
    observed = analysis.Observed(
        command=storable(command.given),
        workload=storable(options.label or command.workload),
        mode="command",
        status=status,
        exit_code=returncode,
        duration_s=duration_s,
        events=seen,
        environment=storable(session.host),
        child_env=storable(relevant_env(env)),
        group_id=session.group_id,
        record_id=record_id,
        created_utc=created,
        cwd=storable(os.getcwd()),
        script_sha256=digest,
        limit=limits.reached and f"{limits.reached} ({options.limit})",
        interrupted_by=signals.name(),
        tune_change=options.change,
        stderr_tail=tail.text(),
        gpus=used,
        samples=samples,
        interval_s=options.telemetry_interval_s,
        other_pids=attribution.other_pids if attribution else [],
        notes=storable(notes),
        precision_reference=_reference(store, used, seen),
        ended_monotonic_s=ended_monotonic_s,
        warm_start=bool(warm and warm.used),
    )
    record = analysis.derive(observed)
    store.keep([record])  # saved beside the store if it cannot take it; named when the command ends
    _keep_script_runs(store, record.id, seen)
    return record


def _keep_script_runs(store: Store, run_id: str, events: list[WatchEvent]) -> None:
    """The script's own MLflow runs (child/mlflow_run.py), linked to the record in the store:
    `--mlflow` adds gpuscout's figures to such a run rather than starting another."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    links = [
        TrackedRun(run_id, "mlflow", e.tracking_uri, e.experiment_id or None, e.run_id, "script", now)
        for e in events
        if isinstance(e, MlflowRunSeen) and e.tracking_uri
    ]
    if links:
        with contextlib.suppress(StoreError):  # the record itself was kept or saved: a link is not worth a failure
            store.mark_tracked(links)


def _enforce(limits: Limits, cancel: threading.Event) -> None:
    while not cancel.wait(0.2):
        if limits.due(time.monotonic()):
            cancel.set()


def _reference(store: Store, gpus: list, events: list[WatchEvent]) -> tuple[float, str] | None:
    """What bench/tune measured mixed precision to buy on this GPU kind, for the model most like
    the watched one (by FLOPs per sample)."""
    if not gpus or not gpus[0].name:
        return None
    flops = next((e.forward_flops for e in events if isinstance(e, FitAnnounced) and e.forward_flops), None)
    records = [r for r in store.list(kind="benchmark") if r.gpu and r.gpu.name == gpus[0].name]
    return device_causes.precision_reference(records, flops)
