"""Running a `gpuscout tune -- COMMAND` session: the baseline (the probe: its facts, whether its
batches repeat, where it calls fit), the search's rounds (tune/search.py), and the final block
(tune/finale.py), each a watched run of the unchanged script (measure/watching.py), stored as it
ends; tune/script.py decides which changes and reads what they bought.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuscout.core.errors import RunError, UsageError
from gpuscout.executor import scratch
from gpuscout.measure import engine
from gpuscout.measure.command import Command, script_of
from gpuscout.measure.series import Runs
from gpuscout.measure.view import View
from gpuscout.measure.watching import TIMED_OUT, WatchOptions, watch_command
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store
from gpuscout.tune import finale, script, search
from gpuscout.tune import patch as patches
from gpuscout.tune.budget import Budget, Steps, epoch_step_s, script_epoch
from gpuscout.tune.change import Change
from gpuscout.tune.results import TuneScriptReport
from gpuscout.tune.trials import Config

# `tune -- COMMAND`'s session when no --budget-minutes is given: the bar issue 77 set (6 minutes)
SCRIPT_BUDGET_S = 6 * 60


@dataclass
class ScriptOptions:
    steps: int | None = None  # every run's training steps; None: what TARGET_TRAINING_S of the baseline ran
    budget_s: float = SCRIPT_BUDGET_S
    patch: Path | None = None  # --patch FILE: the winning changes as a diff, checked on a copy
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    timeout_s: float | None = None  # --timeout: one run longer than this is killed and recorded failed


@dataclass
class Progress:
    """What a display is told: each run as it starts and ends."""

    started: Callable[[str, int, int], None] = lambda name, number, total: None
    ended: Callable[[str, WatchRecord], None] = lambda name, record: None


@dataclass
class Session:
    command: Command
    options: ScriptOptions
    context: engine.Session
    store: Store
    view: Callable[[], View]
    progress: Progress = field(default_factory=Progress)
    # one persistent XLA compilation cache for the session's runs (jax): what a change does not
    # touch (the weights' initializers, the baseline's step when it runs again) is compiled once
    cache: Path | None = None
    probe: WatchRecord | None = None  # the first baseline run: its facts and call sites
    # the runs' shared instrumentation and warm interpreters (measure/series.py)
    runs: Runs | None = None
    no_epochs: str | None = None  # why the baseline's runs count steps, not whole epochs (budget.Steps)

    @property
    def patch(self) -> Path | None:
        return self.options.patch

    @property
    def script(self) -> str | None:
        """The script file the command runs, as typed (None for a shell line, -m or -c)."""
        return None if self.command.shell else script_of(self.command.argv)

    @property
    def root(self) -> Path:
        """The script's folder: what a patch may touch."""
        return Path(self.script).resolve().parent if self.script else Path.cwd().resolve()

    def copied(self, into: Path) -> Command | None:
        """The command with its script taken from `into` (a patched copy of the script's folder),
        forked from the script's own warm interpreter where it has one."""
        found = self.script
        if found is None:
            return None
        argv = list(self.command.argv)
        argv[argv.index(found)] = copy = str(into / Path(found).resolve().relative_to(self.root))
        if self.runs is not None:
            self.runs.copies[copy] = found
        return replace(self.command, argv=argv)

    def run(
        self,
        name: str,
        steps: int | None,
        change: Change | None,
        number: int,
        total: int,
        check_repeats: bool = False,
        command: Command | None = None,
        at_most_s: float | None = None,
        whole_epochs: bool = False,
    ) -> WatchRecord:
        """One run of the command: `steps` training steps (else TARGET_TRAINING_S of training),
        stopped at `at_most_s` seconds of training if that comes first (a candidate far slower than
        its reference: trials.SLOWER_CUT); `whole_epochs`: the steps are whole epochs, the last
        run to its end."""
        self.progress.started(name, number, total)
        options = WatchOptions(
            steps=steps,
            duration_s=at_most_s if steps else script.TARGET_TRAINING_S,
            window_s=script.WINDOW_S,
            window_steps=max(1, steps // script.WINDOWS_PER_RUN) if steps else None,
            whole_epochs=whole_epochs and steps is not None,
            change=change.name if change else None,
            change_settings=change.settings if change else None,
            compilation_cache=self.cache,
            check_repeats=check_repeats,
            tell_augmentation=check_repeats,
            timeout_s=self.options.timeout_s,
        )
        # the probe too forks from the session's warm interpreter: it alone checks repeats and
        # tells augmentation, which the fork reads from its own environment (measure/series.py);
        # what it imports past the scan of the script's top is imported there for the next runs
        record = watch_command(command or self.command, options, self.context, self.store, self.view(), self.runs)
        self.progress.ended(name, record)
        return record


# The fewest runs a session that measures anything makes: the baseline, one change, the baseline
# after it, and the closing baseline run.
SESSION_RUNS = 4


def least_budget_s(run_s: float) -> float:
    """The least --budget-minutes that holds SESSION_RUNS runs of `run_s` each, a tenth over for noise."""
    return SESSION_RUNS * run_s * 1.1


def tune_script(session: Session) -> TuneScriptReport:
    """The whole session; the report (each round's rows, the path kept, the best against the
    baseline, the patched copy, what is left, the changes not tried and why)."""
    session.cache = scratch.make("tunecache")  # swept up if gpuscout dies
    warm_logs = scratch.make("tunewarm")  # the warm interpreters' own output
    session.runs = Runs.begin(warm_logs)
    try:
        return _session(session)
    finally:
        session.runs.close()
        shutil.rmtree(session.cache, ignore_errors=True)
        shutil.rmtree(warm_logs, ignore_errors=True)


def _sources(session: Session) -> dict[Path, str]:
    """Digests of the script's own Python files (its folder's, not deeper): a session whose runs
    saw different code measured nothing it can hand over."""
    files = sorted(session.root.glob("*.py")) if session.script else []
    return {f: patches.digest(f) for f in files[:200] if f.is_file()}


def _session(session: Session) -> TuneScriptReport:
    options = session.options
    sources = _sources(session)
    budget = Budget(options.budget_s)
    counter = iter(range(1, 10_000))
    probe = session.run("baseline", options.steps, None, next(counter), 0, check_repeats=True)
    if probe.status == "interrupted":
        raise KeyboardInterrupt
    killed = next((note for note in probe.notes if note.startswith(TIMED_OUT)), None)
    if killed:  # a run the watchdog ended: nothing after it would be measured against a finished baseline
        raise RunError(
            f"tune's first baseline run of {session.command.workload} was {killed}; give --timeout more time, "
            f"or --steps fewer steps (the run is stored as {probe.id})"
        )
    main = probe.main
    if main is None or main.custom or not probe.windows:
        # The script ran: what it did is stored (a crash and its explanation are a finding), so
        # this is a run that failed (exit 1), not bad input (exit 2, which changes nothing).
        failed = probe.status == "failed"
        why = (
            f"failed before any step{f' ({probe.error.message})' if probe.error and probe.error.message else ''}"
            if failed
            else "called no Model.fit"
        )
        raise RunError(
            f"tune needs the steps of a Keras Model.fit: {session.command.workload} {why}; the baseline is "
            f"stored as {probe.id}: `gpuscout results show {probe.id}` shows what happened"
        )
    budget.seen(probe)
    epoch = script_epoch(probe)
    known = not isinstance(epoch, str)
    steps = Steps(
        options.steps or max(main.steps, script.MIN_STEPS),
        fixed=options.steps is not None,
        epoch=epoch[0] if known else None,
        epoch_samples=epoch[1] if known else None,
    )
    step_s = epoch_step_s(probe, budget.paces["baseline"].step_s)
    warm = None
    if known and step_s and steps.cold_misfit(step_s) and budget.allows([budget.cost("baseline", steps.base)] * 4):
        # the probe ran cold (caches, the page cache, the compilation cache, clocks): its pace never
        # decides how runs are sized; a warm run says whether whole epochs fit (issue 86: 964 ms a
        # step in the cold first run against 226 ms warm dropped a session to windows)
        warm = session.run("baseline (warm)", steps.base, None, next(counter), 0)
        if warm.status == "interrupted":
            raise KeyboardInterrupt
        if warm.ok and warm.main is not None and warm.windows:
            budget.seen(warm)
            step_s = epoch_step_s(warm, budget.paces["baseline"].step_s)
    if known and step_s and steps.fits(step_s):
        steps = replace(steps, base=steps.whole(steps.base))
    else:  # the baseline's runs count steps; a faster setting's may yet hold whole epochs (Steps.of)
        session.no_epochs = (
            epoch
            if not known
            else f"the baseline's epoch of {epoch[0]:,} steps takes about {epoch[0] * (step_s or 0):.0f} s: "
            f"{script.MIN_RUN_EPOCHS} of them a run would not fit the session"
        )
    records = [probe, *([warm] if warm else [])]
    reserve = search.FINAL_RUNS + bool(session.patch)
    # one change measured against the baseline, and the closing baseline run: what a session needs
    if not budget.allows([budget.cost("baseline", steps.base)] * (SESSION_RUNS - 1)):
        spent = options.budget_s - budget.left_s()
        raise UsageError(
            f"--budget-minutes {options.budget_s / 60:g} holds the baseline ({spent:.0f} s a run) but not one "
            f"change measured against it: give --budget-minutes {math.ceil(least_budget_s(spent) / 60)} or more "
            f"(the baseline is stored as {probe.id})"
        )

    session.probe = probe

    def run(
        config: Config, name: str, count: int, command: Command | None = None, at_most_s: float | None = None
    ) -> WatchRecord:
        whole = steps.is_whole(count, config.settings.batch_size or probe.batch_size, probe.batch_size)
        record = session.run(
            name, count, config.as_change(), next(counter), 0, command=command, at_most_s=at_most_s, whole_epochs=whole
        )
        records.append(record)
        return record

    found = search.search(
        run,
        lambda facts, kept: script.plan(facts, options.only, (*options.skip, *kept), script_batch=probe.batch_size),
        probe,
        budget,
        reserve,
        steps,
    )
    final = finale.measure(run, found, session, budget, steps)
    changed = [f.name for f, d in sources.items() if not f.is_file() or patches.digest(f) != d]
    if changed:
        raise UsageError(
            f"{', '.join(changed)} changed during the tune session: its runs measured different code, so "
            f"nothing is handed over (every run is stored); run tune again on a script left alone"
        )
    return finale.report(session, found, final, probe, steps, records, budget)
