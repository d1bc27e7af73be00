"""A sweep from file to summary: validate, plan (resume), run (local threads or Ray), store every
trial, summarise, write TensorBoard logs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


from gpuscout.core.versions import __version__
from gpuscout.core import outputs
from gpuscout.measure import engine, planning
from gpuscout.core.errors import RunError, UsageError, host_port
from gpuscout.core.provenance import utc_now
from gpuscout.store import Store
from gpuscout.store.failures import StoreFailure
from gpuscout.sweep import runner as run_lib
from gpuscout.sweep import schedule
from gpuscout.sweep import leases as leases_lib
from gpuscout.sweep import search as search_lib
from gpuscout.sweep import workload_trials
from gpuscout.sweep.spec import SWEEP_NAME, SweepFile, Trial, check_commands, expand, load
from gpuscout.sweep.summary import OWN_FILES, SUMMARY, best_of, summarise, write_tensorboard
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import Sampler


class Display:
    def planned(self, total: int, todo: int, slots: int) -> None: ...
    def started(self, trial: Trial, slot: run_lib.Slot) -> None: ...
    def finished(self, result: run_lib.TrialResult, best: dict | None) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class SweepOptions:
    gpus: list[int] | None = None
    cpu_slots: int | None = None
    executor: str = "local"
    address: str | None = None
    resume: bool = False
    retry_failed: bool = False  # run the trials that failed (oom, timeout) again; implies resume
    dry_run: bool = False
    log_root: Path | None = None


@dataclass
class Plan:
    sweep: SweepFile
    sweep_hash: str
    trials: list[Trial]
    todo: list[Trial]
    done: list[dict]
    slots: list[run_lib.Slot]
    log_root: Path
    notes: list[str] = field(default_factory=list)
    specs: dict = field(default_factory=dict)  # workload sweeps: each trial's run, by trial key
    # trials whose driver died after they ended: their results, read from their files, to store
    adopted: list = field(default_factory=list)
    path: Path | None = None  # the sweep file
    states: dict[str, str] = field(default_factory=dict)  # trial key -> its state now, in words


@dataclass
class Checked:
    """A sweep file that can run here: every trial's command made, its slots and runs planned."""
    sweep: SweepFile
    sweep_hash: str
    trials: list[Trial]
    slots: list[run_lib.Slot]
    specs: dict
    path: Path


def check(path: Path, options: SweepOptions, nvml: Nvml) -> Checked:
    """Everything that can be wrong with the sweep file and the options, found before the store
    is opened (a refused sweep leaves no store behind) and before the first trial starts."""
    sweep, sweep_hash = load(path)
    trials = expand(sweep)
    check_commands(sweep, trials, path)
    if search_lib.needed(sweep):
        search_lib.require_optuna()
        if options.executor == "ray":
            raise UsageError("early_stop and strategy tpe run on this host's slots: drop --executor ray "
                             "(the study's journal lives beside the sweep's files)")
    if options.cpu_slots is not None and options.gpus is not None:
        raise UsageError("--gpus and --cpu-slots exclude each other")
    if options.cpu_slots is not None and options.cpu_slots < 1:
        raise UsageError(f"--cpu-slots must be >= 1, got {options.cpu_slots}")
    if options.executor not in ("local", "ray"):
        raise UsageError(f"unknown --executor {options.executor!r}: choose local or ray")
    if options.executor == "ray" and options.address and options.address.startswith("ray://"):
        if host_port(options.address.removeprefix("ray://")) is None:
            raise UsageError(f"--address must be ray://HOST:PORT of a Ray client server (ports 1 to 65535), got "
                             f"{options.address[:80]!r}")
    elif options.executor == "ray" and options.address:
        from gpuscout.sweep.ray_executor import answering

        answering(options.address)  # a head nobody runs: said before anything starts
    gpus = options.gpus
    if options.cpu_slots is None:
        if gpus is None:
            if not nvml.available or nvml.count == 0:
                raise UsageError(f"no GPU found ({nvml.error or 'NVML reports none'}): give --cpu-slots N to run "
                                 "trials on the CPU")
            gpus = list(range(nvml.count))
        planning.gpu_indices(gpus, nvml)
    slots = run_lib.slots_for(gpus, options.cpu_slots, sweep.trials_per_gpu)
    specs = workload_trials.plan(sweep, trials, nvml, slots[0].gpu_index) if sweep.workload else {}
    return Checked(sweep, sweep_hash, trials, slots, specs, path)


def plan(checked: Checked, options: SweepOptions, store: Store) -> Plan:
    """What is left to run of a checked sweep, from what the store holds of it."""
    sweep, sweep_hash, trials = checked.sweep, checked.sweep_hash, checked.trials
    stored = {t["key"]: t for t in store.trials(sweep.name)}
    if sweep.strategy.kind == "tpe":  # proposed as the sweep goes: those stored are its trials so far
        trials = [Trial(t["key"], t["index"], t["params"]) for t in sorted(stored.values(), key=lambda t: t["index"])]
    if stored and not (options.resume or options.retry_failed) and not options.dry_run:
        raise UsageError(f"sweep {sweep.name!r} already has {len(stored)} trial(s) in {store.path}: --resume to "
                         "finish it, or give the sweep another name")
    notes = []
    if stored and {t["sweep_hash"] for t in stored.values()} != {sweep_hash}:
        notes.append("the sweep file changed since the stored trials ran; trials are matched by their parameters")
    again = again_statuses(options)
    finished = {k for k, t in stored.items() if t["status"] not in again}
    log_root = options.log_root or logs_folder(store.path, sweep.name)
    check_folder(log_root, store.path, trials, named=options.log_root is not None)
    held, adopted = _left_running(sweep, trials, stored, store.leases(sweep.name), log_root)
    if held:
        notes.append(f"{len(held)} trial(s) are running under another gpuscout sweep ({', '.join(sorted(held.values()))}): "
                     "left to it")
    todo = [t for t in trials if t.key not in finished and t.key not in held and t.key not in adopted]
    done = [stored[t.key] for t in trials if t.key in finished]
    states = {t.key: _state(stored.get(t.key), held.get(t.key), adopted.get(t.key), again) for t in trials}
    return Plan(sweep, sweep_hash, trials, todo, done, checked.slots, log_root, notes, checked.specs,
                list(adopted.values()), checked.path, states)


def _state(stored: dict | None, holder: str | None, adopted: run_lib.TrialResult | None, again: tuple) -> str:
    """A trial's state as it is now, in words: what the store says, corrected by what is known of
    its driver (a trial stored `running` whose driver is gone is not running)."""
    if holder is not None:
        return f"running under another gpuscout sweep ({holder})"
    if adopted is not None:
        return f"{adopted.status}: it finished as its driver ended; taken from its files, not run again"
    if stored is None:
        return "not run yet"
    status = stored["status"]
    if status == "running":
        return "interrupted: its driver ended before it did; runs again"
    if status in again:
        return f"{status}: runs again"
    return status


def check_folder(log_root: Path, store_path: Path, trials: list[Trial], *, named: bool = False) -> None:
    """The sweep's folder and what it will write there, through the one door for files
    (core/outputs/), before any trial runs: a folder of its own (not a link, not a file), its
    summary, TensorBoard input and Optuna journal absent or gpuscout's, its TensorBoard logs
    gpuscout's, each trial's folder a real one."""
    what = "the sweep's folder"
    outputs.own_folder(log_root, store_path, what, named=named, make=False)
    if not log_root.is_dir():
        return
    for name, marks in {**OWN_FILES, search_lib.JOURNAL: ("journal",)}.items():
        outputs.check_inside(log_root, name, store_path, "the sweep's file", marks)
    for name in ("tensorboard", "tensorboard.writing"):
        outputs.check_marked_folder(log_root / name, "the sweep's TensorBoard logs")
    # the compilation cache its trials write (jax's, in the children): a folder of the sweep's own
    outputs.own_folder(run_lib.cache_dir(log_root), store_path, "the sweep's compilation cache", make=False)
    for trial in trials:
        outputs.own_folder(run_lib.trial_dir(log_root, trial), store_path, "a trial's folder", make=False)


def logs_folder(store_path: Path, name: str) -> Path:
    """sweeps/NAME beside the store: the sweep's own folder, never one above it. The sweep file's
    rule for a name (spec.SWEEP_NAME: one path component) is checked again where the path is made."""
    root = store_path.parent / "sweeps"
    if not SWEEP_NAME.fullmatch(name):
        raise UsageError(f"sweep name {name!r} would put its logs outside {root}: rename the sweep")
    return root / name


def again_statuses(options: SweepOptions) -> tuple[str, ...]:
    """The stored statuses of trials that run again: those a driver left (`running`, Ctrl-C), and
    with --retry-failed the failed ones."""
    return ("running", "interrupted") + (("failed", "oom", "timeout") if options.retry_failed else ())


def _left_running(sweep: SweepFile, trials: list[Trial], stored: dict, leases: dict,
                  log_root: Path) -> tuple[dict[str, str], dict[str, run_lib.TrialResult]]:
    """Of the trials stored `running`: those another live driver holds (key -> who), and those
    whose driver died after they ended by themselves (their results, from their files)."""
    held, adopted = {}, {}
    for trial in trials:
        if stored.get(trial.key, {}).get("status") != "running":
            continue
        lease = leases.get(trial.key)
        if lease is not None and leases_lib.alive(*lease):
            held[trial.key] = f"pid {lease[0].get('pid')} on {lease[0].get('host')}"
        elif sweep.command is not None:
            result = run_lib.adopt(sweep, trial, log_root)
            if result is not None:
                adopted[trial.key] = result
    return held, adopted


class _Hooks(schedule.Hooks):
    """The driver's side of a run: leases and results in the store, the display told."""

    def __init__(self, p: Plan, options: SweepOptions, store: Store, display: Display, results: list[dict]) -> None:
        self.p, self.options, self.store, self.display, self.results = p, options, store, display, results
        self.owner = leases_lib.me()
        self.running: dict[str, Trial] = {}  # claimed, and no result stored yet
        self.new: list[dict] = []  # this execution's results: the wall time and idle shares are theirs
        self.unstored: list[int] = []  # trials whose result the store could not take
        self.failure: str | None = None
        self.cache_use = {"programs": 0, "hits": 0}  # this execution's workload trials, summed
        self.search: search_lib.Search | None = None  # Optuna's study (tpe, early_stop)
        self.said_not_per_epoch = False

    def claim(self, trial: Trial, slot: run_lib.Slot) -> bool:
        taken = self.store.claim_trial(self.p.sweep.name, trial.key, trial.index, self.p.sweep_hash, trial.params,
                                       self.owner, utc_now(), leases_lib.alive, again_statuses(self.options))
        if taken:
            self.running[trial.key] = trial
            if self.search is not None:
                self.search.begin(trial)
        return taken

    def started(self, trial: Trial, slot: run_lib.Slot) -> None:
        self.display.started(trial, slot)

    def spawned(self, trial: Trial, pgid: int) -> None:
        self.store.lease_group(self.p.sweep.name, trial.key, self.owner["driver"], leases_lib.group(pgid))

    def tick(self) -> None:
        self.store.renew_leases(self.p.sweep.name, sorted(self.running), self.owner["driver"])

    def stopped(self) -> None:
        for trial in list(self.running.values()):
            self.finished(run_lib.TrialResult(trial.key, trial.index, trial.params, "interrupted", 0, "", None, 0.0,
                                              0.0, 0.0, message="stopped with the sweep before it reported"))

    def noted(self, text: str) -> None:
        self.p.notes.append(text)
        self.display.note(text)

    def finished(self, result: run_lib.TrialResult, adopted: bool = False) -> None:
        data = result.to_dict() | {"metric": self.p.sweep.metric.model_dump()}  # what `report` plots it by
        try:
            self.store.finish_trial(self.p.sweep.name, result.key, result.index, self.p.sweep_hash, result.status,
                                    result.params, data, utc_now(), result.records)
        except StoreFailure as exc:
            # The trial stays `running` under this driver's lease: `--resume` takes its result from
            # its files (a command trial) once the store works; a workload trial's records are
            # saved beside the store.
            self.unstored.append(result.index)
            self.failure = str(exc)
            if result.records:
                self.store.keep(result.records)
        self.running.pop(result.key, None)
        if self.search is not None and result.status != "interrupted":
            self.search.finish(result.key, result.status, result.metrics.get(self.p.sweep.metric.name))
        metric = self.p.sweep.metric.name
        if (self.p.sweep.early_stop is not None and not self.said_not_per_epoch and result.status == "ok"
                and metric in result.metrics and not search_lib.reported_per_epoch(data, metric)):
            # Known only once a trial ran: the file cannot say how a script reports. Said once.
            self.said_not_per_epoch = True
            self.noted(f"early_stop cannot act: trial {result.index} reported {metric} only at its end, never "
                       "per epoch, so every trial runs to its end; report it each epoch (Model.fit with "
                       "validation data, gpuscout.sweep.report(..., step=epoch), or JSON lines with \"epoch\")")
        for record in result.records:
            if record.compilation_cache is not None:
                self.cache_use["programs"] += record.compilation_cache.programs
                self.cache_use["hits"] += record.compilation_cache.hits
        if result.status != "interrupted":
            self.results.append(data)
            if not adopted:
                self.new.append(data)
        self.display.finished(result, best_of(self.p.sweep, self.results)
                              or best_of(self.p.sweep, self.results, "timeout"))


def _run(p: Plan, options: SweepOptions, trial_runner: run_lib.TrialRunner, hooks: _Hooks) -> str | None:
    """The trials left, on this host's slots or on Ray; why the sweep stopped early, if it did."""
    if options.executor == "ray":
        from gpuscout.sweep.ray_executor import run_ray

        return run_ray(p.todo, p.sweep, options.address, options.cpu_slots is not None, p.log_root, p.specs, hooks)
    more = None
    if p.sweep.strategy.kind == "tpe":
        proposed = [len(p.trials)]  # stored trials hold indices 0..n-1

        def more() -> Trial | None:
            if proposed[0] >= p.sweep.strategy.trials:
                return None
            proposed[0] += 1
            return hooks.search.propose(proposed[0] - 1)
    return schedule.run_local(p.todo, p.slots, trial_runner, p.sweep.max_consecutive_failures, hooks, more)


def execute(p: Plan, options: SweepOptions, nvml: Nvml, store: Store, display: Display) -> dict:
    display.planned(len(p.trials), len(p.todo), len(p.slots))
    results: list[dict] = [t["result"] for t in p.done if t["result"]]
    hooks = _Hooks(p, options, store, display, results)
    for result in p.adopted:  # ended before their driver died: stored now, not run again
        hooks.finished(result, adopted=True)
    outputs.own_folder(p.log_root, store.path, "the sweep's folder", named=options.log_root is not None)
    sampler_factory = (lambda gpu: Sampler(nvml, gpu).start()) if nvml.available else None
    if search_lib.needed(p.sweep):
        hooks.search = search_lib.Search(p.sweep, p.log_root)
    trial_runner = run_lib.TrialRunner(p.sweep, p.log_root, sampler_factory, p.specs,
                                       engine.Session(nvml, engine.MeasureOptions(timeout_s=p.sweep.timeout_s)),
                                       search=hooks.search)
    try:
        reason = _run(p, options, trial_runner, hooks)
    except StoreFailure as exc:  # trials have run: exit 1, and what ended is on disk for --resume
        raise RunError(f"{exc}; the sweep stopped, and `gpuscout sweep {p.path} --resume` goes on from its trials' "
                       "files once the store works") from None
    finally:
        trial_runner.close()
    if hooks.unstored:
        raise RunError(f"{hooks.failure}; the results of trial(s) {', '.join(map(str, hooks.unstored))} are in their "
                       f"files under {p.log_root}: `gpuscout sweep {p.path} --resume` stores them once the store works")
    new = hooks.new
    summary = summarise(p, results, new, nvml, reason)
    summary["compilation_cache"] = ({"folder": str(run_lib.cache_dir(p.log_root)), **hooks.cache_use}
                                    if p.sweep.compilation_cache else None)
    summary["tensorboard"] = write_tensorboard(p, results, store.path, changed=bool(new or p.adopted))
    try:  # the trials are stored: a summary that cannot be written is said, not a reason to fail
        outputs.replace_inside(p.log_root, SUMMARY, json.dumps({"gpuscout_version": __version__, **summary}, indent=2,
                                                               default=str), store.path, "the sweep's file",
                               OWN_FILES[SUMMARY])
    except (OSError, UsageError) as exc:
        summary["notes"].append(f"{p.log_root / SUMMARY} was not written ({getattr(exc, 'strerror', None) or exc}); "
                                "the trials are stored")
    return summary
