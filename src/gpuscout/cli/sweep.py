"""`gpuscout sweep`: hyperparameter sweeps over every GPU of a host (or CPU slots), or on Ray."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, Gpus, StorePath, Tracking, gpu_indices, grouped
from gpuscout.report.sweep import print_summary, print_trials, sweep_view
from gpuscout.store import Store
from gpuscout.sweep import driver, resume_plan
from gpuscout.telemetry.nvml import Nvml
from gpuscout.tracking import sending as tracking

HELP = """Run a hyperparameter sweep: one child process per trial, every GPU kept busy, retries,
timeouts, a live view, every trial stored; then the best trials, the parallel speedup, GPU-hours,
cost and idle time, and TensorBoard logs.

A `command:` trial runs your script unchanged: the metrics named in `reports:` come from Keras
fit's logs (val_accuracy, loss, ...), from JSON lines it prints, or from gpuscout.sweep.report.
Each trial's step time and input wait are kept with it. Templates: `{lr}` is a parameter,
`{{`/`}}` literal braces; a command with shell syntax runs under /bin/sh (or say `shell: true`).

`early_stop:` in the sweep file stops hopeless trials at an epoch's end (`successive_halving`,
`hyperband`, `median`, `patience`; Optuna's own as `optuna_hyperband`, `optuna_median`), each
with its reason; the summary says the slot time saved and how likely a pruned trial was to win.

A trial that failed by its own doing (failed, oom, timeout) runs again only with --retry-failed.
One that did not end by its doing (Ctrl-C, a driver that died, or gpuscout's own failure: a full
disk, its logs that could not be written; the sweep then stops, since every trial would meet it)
is `interrupted` and runs again with --resume. A trial whose code had all run and reported when
its driver stopped (even during its own atexit handlers) is finished: never run twice.

Examples:

    # trials and commands, on any machine
    gpuscout sweep lr.yaml --dry-run

    gpuscout sweep lr.yaml --gpus 0,1,2,3

    # after a crash or Ctrl-C: nothing done twice
    gpuscout sweep lr.yaml --resume

    # the failed trials again (after fixing the cause)
    gpuscout sweep lr.yaml --retry-failed

    # no GPU: two trials at a time on the CPU
    gpuscout sweep lr.yaml --cpu-slots 2

    gpuscout sweep lr.yaml --executor ray --address ray://head:10001

    # a parent MLflow run, a child run per trial
    gpuscout sweep lr.yaml --mlflow http://mlflow:5000 --experiment lr-sweep
"""


@grouped
def sweep(
    path: Path = typer.Argument(..., help="The sweep file (YAML)."),
    gpus: Gpus = None,
    cpu_slots: int | None = typer.Option(None, help="Run N trials at a time on the CPU instead of GPUs."),
    executor: str = typer.Option("local", help="local (this host) | ray (a Ray cluster, see --address)."),
    address: str | None = typer.Option(None, help="Ray cluster address [default: start a local Ray]."),
    resume: bool = typer.Option(False, "--resume", help="Skip trials already done; run those left running again."),
    retry_failed: bool = typer.Option(
        False,
        "--retry-failed",
        help="Run the trials that failed (oom, timeout) again, and those not run yet; the rest are kept.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check the sweep, list the trials and their commands, run nothing (any machine)."
    ),
    *,
    track: Tracking,
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    target = track.target(store_path)
    indices = gpu_indices(gpus)
    options = resume_plan.SweepOptions(
        gpus=None if indices is None else list(indices),
        cpu_slots=cpu_slots,
        executor=executor,
        address=address,
        resume=resume,
        retry_failed=retry_failed,
        dry_run=dry_run,
    )
    with Nvml() as nvml:
        checked = resume_plan.check(path, options, nvml)  # before the store: a refused sweep leaves none
        with Store(store_path) as store:
            plan = resume_plan.plan(checked, options, store)
            if dry_run:
                print_trials(plan, as_json)
                return
            with sweep_view(plan.sweep, quiet=as_json) as view:
                summary = driver.execute(plan, options, nvml, store, view)
            emit(summary, as_json)
            tracking.send_sweep(target, summary, print_summary, store)
    if summary.failed:
        raise typer.Exit(1)
