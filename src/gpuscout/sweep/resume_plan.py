"""What a sweep will run: its file checked against this host (every trial's command made, its
slots and runs planned), and, on a resume, the trials already stored, held or left running."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.core import outputs
from gpuscout.core.errors import UsageError, host_port
from gpuscout.measure import rules
from gpuscout.record.trial import StoredTrial
from gpuscout.store import Store
from gpuscout.sweep import leases as leases_lib
from gpuscout.sweep import runner as run_lib
from gpuscout.sweep import search as search_lib
from gpuscout.sweep import workload_trials
from gpuscout.sweep.attempts import finished_attempt
from gpuscout.sweep.expansion import Trial, check_commands, expand
from gpuscout.sweep.spec import SWEEP_NAME, SweepFile, load
from gpuscout.sweep.summary import OWN_FILES
from gpuscout.telemetry.nvml import Nvml


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
    done: list[StoredTrial]
    slots: list[run_lib.Slot]
    log_root: Path
    cache: Path  # jax's persistent compilation cache of its trials (cache_folder)
    notes: list[str] = field(default_factory=list)
    specs: dict = field(default_factory=dict)  # workload sweeps: each trial's run, by trial key
    # trials whose driver died after they ended: their results, read from their files, to store
    adopted: list = field(default_factory=list)
    path: Path | None = None  # the sweep file
    states: dict[str, str] = field(default_factory=dict)  # trial key -> its state now, in words
    # a dry run of a new tpe sweep: the trials the sampler proposes first (search.first_proposals)
    preview: list[Trial] = field(default_factory=list)


@dataclass
class Checked:
    """A sweep file that can run here: every trial's command made, its slots and runs planned."""

    sweep: SweepFile
    sweep_hash: str
    trials: list[Trial]
    slots: list[run_lib.Slot]
    specs: dict
    path: Path
    notes: list[str] = field(default_factory=list)


def check(path: Path, options: SweepOptions, nvml: Nvml) -> Checked:
    """Everything that can be wrong with the sweep file and the options, found before the store
    is opened (a refused sweep leaves no store behind) and before the first trial starts."""
    sweep, sweep_hash = load(path)
    trials = expand(sweep)
    check_commands(sweep, trials, path)
    if search_lib.needed(sweep):
        search_lib.require_optuna()
        if options.executor == "ray":
            raise UsageError(
                "early_stop and strategy tpe run on this host's slots: drop --executor ray "
                "(the study's journal lives beside the sweep's files)"
            )
    if options.cpu_slots is not None and options.gpus is not None:
        raise UsageError("--gpus and --cpu-slots exclude each other")
    if options.cpu_slots is not None and options.cpu_slots < 1:
        raise UsageError(f"--cpu-slots must be >= 1, got {options.cpu_slots}")
    if options.executor not in ("local", "ray"):
        raise UsageError(f"unknown --executor {options.executor!r}: choose local or ray")
    if options.executor == "ray" and options.address and options.address.startswith("ray://"):
        if host_port(options.address.removeprefix("ray://")) is None:
            raise UsageError(
                f"--address must be ray://HOST:PORT of a Ray client server (ports 1 to 65535), got "
                f"{options.address[:80]!r}"
            )
    elif options.executor == "ray" and options.address:
        from gpuscout.sweep.ray_executor import answering

        answering(options.address)  # a head nobody runs: said before anything starts
    gpus, cpu_slots, notes = options.gpus, options.cpu_slots, []
    if cpu_slots is None:
        if gpus is None and (not nvml.available or nvml.count == 0):
            found = nvml.error or "NVML reports none"
            if not options.dry_run:
                raise UsageError(f"no GPU found ({found}): give --cpu-slots N to run trials on the CPU")
            # a dry run shows the plan on any machine: one CPU slot stands in for the GPUs it would use
            cpu_slots = 1
            notes.append(f"no GPU here ({found}): planned on one CPU slot; on a GPU host each trial gets a GPU")
        elif gpus is None:
            gpus = list(range(nvml.count))
        if gpus is not None:
            rules.gpu_indices(gpus, nvml)
    slots = run_lib.slots_for(gpus, cpu_slots, sweep.trials_per_gpu)
    specs = workload_trials.plan(sweep, trials, nvml, slots[0].gpu_index) if sweep.workload else {}
    return Checked(sweep, sweep_hash, trials, slots, specs, path, notes)


def plan(checked: Checked, options: SweepOptions, store: Store) -> Plan:
    """What is left to run of a checked sweep, from what the store holds of it."""
    sweep, sweep_hash, trials = checked.sweep, checked.sweep_hash, checked.trials
    stored = {t.key: t for t in store.trials(sweep.name)}
    if sweep.strategy.kind == "tpe":  # proposed as the sweep goes: those stored are its trials so far
        trials = [Trial(t.key, t.index, t.params) for t in sorted(stored.values(), key=lambda t: t.index)]
    if stored and not (options.resume or options.retry_failed) and not options.dry_run:
        raise UsageError(
            f"sweep {sweep.name!r} already has {len(stored)} trial(s) in {store.path}: --resume to "
            "finish it, or give the sweep another name"
        )
    notes = list(checked.notes)
    if stored and {t.sweep_hash for t in stored.values()} != {sweep_hash}:
        notes.append("the sweep file changed since the stored trials ran; trials are matched by their parameters")
    again = again_statuses(options)
    finished = {k for k, t in stored.items() if t.status not in again}
    log_root = options.log_root or logs_folder(store.path, sweep.name)
    cache = cache_folder(store.path, log_root, named=options.log_root is not None)
    check_folder(log_root, store.path, trials, cache, named=options.log_root is not None)
    held, adopted = _left_running(
        sweep, trials, stored, store.leases(sweep.name), log_root, options.resume or options.retry_failed
    )
    if held:
        notes.append(
            f"{len(held)} trial(s) are running under another gpuscout sweep ({', '.join(sorted(held.values()))}): "
            "left to it"
        )
    todo = [t for t in trials if t.key not in finished and t.key not in held and t.key not in adopted]
    done = [stored[t.key] for t in trials if t.key in finished]
    states = {t.key: _state(stored.get(t.key), held.get(t.key), adopted.get(t.key), again) for t in trials}
    first = (
        search_lib.first_proposals(sweep, len(checked.slots))
        if options.dry_run and sweep.strategy.kind == "tpe" and not stored
        else []
    )
    return Plan(
        sweep,
        sweep_hash,
        trials,
        todo,
        done,
        checked.slots,
        log_root,
        cache,
        notes,
        checked.specs,
        list(adopted.values()),
        checked.path,
        states,
        first,
    )


def _state(stored: StoredTrial | None, holder: str | None, adopted: run_lib.TrialResult | None, again: tuple) -> str:
    """A trial's state as it is now, in words: what the store says, corrected by what is known of
    its driver (a trial stored `running` whose driver is gone is not running)."""
    if holder is not None:
        return f"running under another gpuscout sweep ({holder})"
    if adopted is not None:
        return f"{adopted.status}: it finished as its driver ended; taken from its files, not run again"
    if stored is None:
        return "not run yet"
    status = stored.status
    if status == "running":
        return "interrupted: its driver ended before it did; runs again"
    if status in again:
        return f"{status}: runs again"
    return status


def check_folder(log_root: Path, store_path: Path, trials: list[Trial], cache: Path, *, named: bool = False) -> None:
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
    # the compilation cache its trials write (jax's, in the children): a folder of gpuscout's own
    outputs.own_folder(cache, store_path, "the sweeps' compilation cache", make=False)
    for trial in trials:
        outputs.own_folder(run_lib.trial_dir(log_root, trial), store_path, "a trial's folder", make=False)


def cache_folder(store_path: Path, log_root: Path, *, named: bool) -> Path:
    """jax's persistent compilation cache of a sweep's trials: sweeps/.xla-cache beside the store,
    one for all of its sweeps, so a sweep run again (another name, more trials, early stopping
    added) loads what an earlier one compiled. On issue 64's sweep its first four trials had
    compiled afresh, most of an early-stopped sweep's cost (docs/benchmarks.md, "one compilation
    cache for a store's sweeps"). A log folder the user named keeps its own. The dot keeps it
    from any sweep's name (spec.SWEEP_NAME). One fixed folder, because jax keys a program by the
    folder's path as well: it hands XLA a subfolder of it for GPU autotuning in the compile
    options it hashes (jax/_src/compiler.py), so a cache moved or copied elsewhere loads nothing."""
    return log_root / "xla-cache" if named else store_path.parent / "sweeps" / ".xla-cache"


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


# The outcomes only a trial that ran to its end gives: taken from its files where the store says
# otherwise (interrupted, or nothing at all), never run again.
FINISHED_BY_ITSELF = ("ok",)


def _ended_with_its_work(sweep: SweepFile, result: run_lib.TrialResult) -> bool:
    """Whether a trial whose driver died is taken from its files: it ran to its end, or it reported
    the sweep's metric before its guard ended it with the driver (its side effect done, only its
    exit cut: run again, it would run twice). One that ended without it may have ended because its
    driver died (a warm trial killed a second into its run was stored failed, its metric never
    reported: issue 87, item 9): it runs again."""
    return result.status in FINISHED_BY_ITSELF or sweep.metric.name in result.metrics


def _left_running(
    sweep: SweepFile,
    trials: list[Trial],
    stored: dict[str, StoredTrial],
    leases: dict,
    log_root: Path,
    resume: bool = True,
) -> tuple[dict[str, str], dict[str, run_lib.TrialResult]]:
    """Of the trials stored `running`: those another live driver holds (key -> who), and those
    whose driver died after they ran to their end (their results, from their files). On a
    resume, also a trial stored `interrupted`, or not stored at all, whose files say it ran to its
    end: a stop signal just after it ended, or a store that could not take its result (a full disk),
    left the store behind its files (issue 79, item 3)."""
    held, adopted = {}, {}
    for trial in trials:
        mine = stored.get(trial.key)
        if mine is not None and mine.status == "running":
            lease = leases.get(trial.key)
            if lease is not None and leases_lib.alive(*lease):
                held[trial.key] = f"pid {lease[0].get('pid')} on {lease[0].get('host')}"
            elif sweep.command is not None:
                result = adopt(sweep, trial, log_root)
                if result is not None and _ended_with_its_work(sweep, result):
                    adopted[trial.key] = result
        elif resume and sweep.command is not None and (mine is None or mine.status == "interrupted"):
            result = adopt(sweep, trial, log_root)
            if result is not None and result.status in FINISHED_BY_ITSELF:
                adopted[trial.key] = result
    return held, adopted


def adopt(sweep: SweepFile, trial: Trial, log_root: Path) -> run_lib.TrialResult | None:
    """The result of a trial whose last attempt ended by itself after its driver died (its files
    say so: sweep/attempts.py); None when it has to run again."""
    folder = run_lib.trial_dir(log_root, trial)
    found = finished_attempt(sweep, folder)
    if found is None:
        return None
    files, attempt, duration_s = found
    return run_lib.TrialResult(
        key=trial.key,
        index=trial.index,
        params=trial.params,
        status=attempt.status,
        attempts=1,
        slot="adopted",
        duration_s=duration_s,
        metrics=attempt.metrics,
        history=attempt.history,
        message=attempt.message,
        log_dir=str(folder),
        telemetry=attempt.telemetry,
        steps=attempt.steps,
        explanations=attempt.explanations,
        warm=attempt.warm,
    )
