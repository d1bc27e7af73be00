"""A sweep from file to summary: validate, plan (resume), run (local threads or Ray), store every
trial, summarise, write TensorBoard logs."""

from __future__ import annotations

import json

from gpuscout.analysis.stats import import_scipy_in_background
from gpuscout.core import outputs
from gpuscout.core.errors import RunError, UsageError
from gpuscout.core.provenance import utc_now
from gpuscout.core.versions import __version__
from gpuscout.measure import engine
from gpuscout.record.trial import TrialOutcome
from gpuscout.store import Store
from gpuscout.store.failures import StoreFailure
from gpuscout.sweep import leases as leases_lib
from gpuscout.sweep import runner as run_lib
from gpuscout.sweep import schedule, stopping
from gpuscout.sweep import search as search_lib
from gpuscout.sweep.expansion import Trial
from gpuscout.sweep.results import CompilationCache, SweepSummary, WarmStart
from gpuscout.sweep.resume_plan import (
    FINISHED_BY_ITSELF,
    Display,
    Plan,
    SweepOptions,
    adopt,
    again_statuses,
)
from gpuscout.sweep.summary import OWN_FILES, SUMMARY, best_of, summarise, write_tensorboard
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import Sampler


class _Hooks(schedule.Hooks):
    """The driver's side of a run: leases and results in the store, the display told."""

    def __init__(
        self, p: Plan, options: SweepOptions, store: Store, display: Display, results: list[TrialOutcome]
    ) -> None:
        self.p, self.options, self.store, self.display, self.results = p, options, store, display, results
        self.owner = leases_lib.me()
        self.running: dict[str, Trial] = {}  # claimed, and no result stored yet
        self.new: list[TrialOutcome] = []  # this execution's results: the wall time and idle shares are theirs
        self.unstored: list[int] = []  # trials whose result the store could not take
        self.failure: str | None = None
        self.cache_use = {"programs": 0, "hits": 0}  # this execution's workload trials, summed
        self.search: search_lib.Search | None = None  # Optuna's study (tpe, early_stop)
        self.said_not_per_epoch = False

    def claim(self, trial: Trial, slot: run_lib.Slot) -> bool:
        taken = self.store.claim_trial(
            self.p.sweep.name,
            trial.key,
            trial.index,
            self.p.sweep_hash,
            trial.params,
            self.owner,
            utc_now(),
            leases_lib.alive,
            again_statuses(self.options),
        )
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
        """The trials still running when the sweep stops, stored as interrupted (run again by
        `--resume`), except one whose own files say it has already ended by itself with its result:
        a signal that came between its end and its driver's reading of it (issue 79, item 3a: 1 of 9
        SIGTERM kills ran such a trial again) must not undo a finished trial."""
        for trial in list(self.running.values()):
            ended = adopt(self.p.sweep, trial, self.p.log_root) if self.p.sweep.command is not None else None
            if ended is not None and ended.status in FINISHED_BY_ITSELF:
                self.finished(ended, adopted=True)
                continue
            self.finished(
                run_lib.TrialResult(
                    key=trial.key,
                    index=trial.index,
                    params=trial.params,
                    status="interrupted",
                    attempts=0,
                    message="stopped with the sweep before it reported",
                )
            )

    def noted(self, text: str) -> None:
        self.p.notes.append(text)
        self.display.note(text)

    def finished(self, result: run_lib.TrialResult, adopted: bool = False) -> None:
        data = result.outcome(self.p.sweep.metric)  # the metric with it: what `report` plots it by
        try:
            self.store.finish_trial(
                self.p.sweep.name,
                result.key,
                result.index,
                self.p.sweep_hash,
                result.status,
                result.params,
                data,
                utc_now(),
                result.records,
            )
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
        if (
            self.p.sweep.early_stop is not None
            and not self.said_not_per_epoch
            and result.status == "ok"
            and metric in result.metrics
            and not stopping.reported_per_epoch(data, metric)
        ):
            # Known only once a trial ran: the file cannot say how a script reports. Said once.
            self.said_not_per_epoch = True
            self.noted(
                f"early_stop cannot act: trial {result.index} reported {metric} only at its end, never "
                "per epoch, so every trial runs to its end; report it each epoch (Model.fit with "
                'validation data, gpuscout.sweep.report(..., step=epoch), or JSON lines with "epoch")'
            )
        for record in result.records:
            if record.compilation_cache is not None:
                self.cache_use["programs"] += record.compilation_cache.programs
                self.cache_use["hits"] += record.compilation_cache.hits
        if result.status != "interrupted":
            self.results.append(data)
            if not adopted:
                self.new.append(data)
        self.display.finished(
            result, best_of(self.p.sweep, self.results) or best_of(self.p.sweep, self.results, "timeout")
        )


def _run(p: Plan, options: SweepOptions, trial_runner: run_lib.TrialRunner, hooks: _Hooks) -> str | None:
    """The trials left, on this host's slots or on Ray; why the sweep stopped early, if it did."""
    if options.executor == "ray":
        from gpuscout.sweep.ray_executor import run_ray

        return run_ray(
            p.todo, p.sweep, options.address, options.cpu_slots is not None, p.log_root, p.cache, p.specs, hooks
        )
    if p.sweep.command is not None:
        # each trial's step statistics need scipy.stats when it ends: imported by the first trials
        # to end, it put 1.5-2 s of import on the first wave's critical path (4 slots on 2 cores,
        # py-spy of the driver); imported now, it overlaps the warm interpreter's imports, which
        # keep one core busy while the trials wait (docs/benchmarks.md, "Hyperband and the median")
        import_scipy_in_background()
    more = None
    if p.sweep.strategy.kind == "tpe":
        proposed = [len(p.trials)]  # stored trials hold indices 0..n-1

        def more() -> Trial | None:
            if proposed[0] >= p.sweep.strategy.trials:
                return None
            proposed[0] += 1
            return hooks.search.propose(proposed[0] - 1)

    return schedule.run_local(p.todo, p.slots, trial_runner, p.sweep.max_consecutive_failures, hooks, more)


def execute(p: Plan, options: SweepOptions, nvml: Nvml, store: Store, display: Display) -> SweepSummary:
    display.planned(len(p.trials), len(p.todo), len(p.slots))
    results = [t.result for t in p.done if t.result]
    hooks = _Hooks(p, options, store, display, results)
    for result in p.adopted:  # ended before their driver died: stored now, not run again
        hooks.finished(result, adopted=True)
    outputs.own_folder(p.log_root, store.path, "the sweep's folder", named=options.log_root is not None)
    sampler_factory = (lambda gpu: Sampler(nvml, gpu).start()) if nvml.available else None
    if search_lib.needed(p.sweep):
        hooks.search = search_lib.Search(p.sweep, p.log_root)
    trial_runner = run_lib.TrialRunner(
        p.sweep,
        p.log_root,
        sampler_factory,
        p.specs,
        engine.Session(nvml, engine.MeasureOptions(timeout_s=p.sweep.timeout_s)),
        search=hooks.search,
        cache=p.cache,
    )
    try:
        reason = _run(p, options, trial_runner, hooks)
    except StoreFailure as exc:  # trials have run: exit 1, and what ended is on disk for --resume
        raise RunError(
            f"{exc}; the sweep stopped, and `gpuscout sweep {p.path} --resume` goes on from its trials' "
            "files once the store works"
        ) from None
    finally:
        trial_runner.close()
    if hooks.unstored:
        raise RunError(
            f"{hooks.failure}; the results of trial(s) {', '.join(map(str, hooks.unstored))} are in their "
            f"files under {p.log_root}: `gpuscout sweep {p.path} --resume` stores them once the store works"
        )
    new = hooks.new
    summary = summarise(p, results, new, nvml, reason)
    summary.compilation_cache = (
        CompilationCache(folder=str(p.cache), **hooks.cache_use) if p.sweep.compilation_cache else None
    )
    warm = trial_runner.warm.summary() if trial_runner.warm is not None else None
    if warm is not None:
        summary.warm_start = WarmStart(trials=sum(1 for r in new if r.warm), of=len(new), **warm)
    summary.tensorboard = write_tensorboard(p, results, store.path, changed=bool(new or p.adopted))
    try:  # the trials are stored: a summary that cannot be written is said, not a reason to fail
        outputs.replace_inside(
            p.log_root,
            SUMMARY,
            json.dumps({"gpuscout_version": __version__, **summary.as_json()}, indent=2, default=str),
            store.path,
            "the sweep's file",
            OWN_FILES[SUMMARY],
        )
    except (OSError, UsageError) as exc:
        summary.notes.append(
            f"{p.log_root / SUMMARY} was not written ({getattr(exc, 'strerror', None) or exc}); the trials are stored"
        )
    return summary
