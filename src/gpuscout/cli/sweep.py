"""`gpuscout sweep`: hyperparameter sweeps over every GPU of a host (or CPU slots), or on Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from gpuscout.errors import UsageError
from gpuscout.report import format as fmt
from gpuscout.store import Store
from gpuscout.sweep import driver
from gpuscout.telemetry.nvml import Nvml


class _Live(driver.Display):
    def __init__(self, progress: Progress, sweep) -> None:
        self.progress, self.sweep, self.task = progress, sweep, None
        self.running = self.failed = self.ok = 0

    def planned(self, total: int, todo: int, slots: int) -> None:
        self.task = self.progress.add_task("starting", total=todo)
        self.slots = slots

    def _describe(self, best: dict | None = None) -> None:
        metric = self.sweep.metric
        best_text = f"best {metric.name} {best['metrics'][metric.name]:.5g} (trial {best['index']})" if best else "no result yet"
        self.progress.update(self.task, description=f"{self.ok} ok, {self.failed} failed, {self.running} running "
                                                    f"on {self.slots} slot(s); {best_text}")

    def started(self, trial, slot) -> None:
        self.running += 1
        self._describe(getattr(self, "best", None))

    def finished(self, result, best) -> None:
        self.running = max(0, self.running - 1)
        if result.status == "ok":
            self.ok += 1
        elif result.status != "interrupted":
            self.failed += 1
        self.best = best
        self.progress.advance(self.task)
        self._describe(best)


def _print_summary(summary: dict, out: Console) -> None:
    metric = summary["metric"]
    t = Table(title=f"sweep {summary['sweep']}: best by {metric['name']} ({metric['direction']})", title_justify="left")
    for c in ("#", "trial", metric["name"], "parameters", "duration", "slot"):
        t.add_column(c)
    for rank, b in enumerate(summary["best"], 1):
        t.add_row(str(rank), str(b["index"]), f"{b['value']:.6g}", json.dumps(b["params"]), fmt.seconds(b["duration_s"]), b["slot"])
    out.print(t)
    counts = summary["status_counts"]
    out.print(f"{summary['run_now']} trial(s) run now ({summary['skipped_done']} already done): "
              + ", ".join(f"{v} {k}" for k, v in counts.items() if v), highlight=False)
    if summary["wall_s"]:
        out.print(f"wall {fmt.seconds(summary['wall_s'])} for {fmt.seconds(summary['trial_seconds_sum'])} of trials: "
                  f"{summary['parallel_speedup']:.2f}x from running in parallel; {summary['trials_per_hour']:.1f} trials/h; "
                  f"{summary['gpu_hours']:.3f} GPU-hours"
                  + (f", {summary['cost_usd']:.2f} USD" if summary["cost_usd"] is not None else ""), highlight=False)
    for gpu, share in summary["gpu_idle_share"].items():
        out.print(f"{gpu} idle {fmt.percent(share)} of the wall time: {fmt.percent(summary['gpu_gap_share'][gpu])} "
                  f"between trials, {fmt.percent(summary['gpu_drain_share'][gpu])} at the end with no trial left",
                  highlight=False)
    if summary["stopped"]:
        out.print(f"[red]stopped early[/]: {summary['stopped']}", highlight=False)
    out.print(f"logs: {summary['log_root']}; TensorBoard: {summary['tensorboard']['note']}", highlight=False)
    for note in summary["notes"]:
        out.print(f"note: {note}", highlight=False)


def sweep(
    path: Path = typer.Argument(..., help="The sweep file (YAML)."),
    gpus: Optional[str] = typer.Option(None, help="GPU indices to use, e.g. 0,1,2,3 [default: every GPU]."),
    cpu_slots: Optional[int] = typer.Option(None, help="Run N trials at a time on the CPU instead of GPUs."),
    executor: str = typer.Option("local", help="local (this host) | ray (a Ray cluster, see --address)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address [default: start a local Ray]."),
    resume: bool = typer.Option(False, "--resume", help="Skip trials already done; run those left running again."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and list the trials; run nothing."),
    store_path: Optional[Path] = typer.Option(None, "--store", envvar="GPUSCOUT_STORE", help="Results store (SQLite)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run a hyperparameter sweep: one child process per trial, every GPU kept busy, retries,
    timeouts, a live view, every trial stored; then the best trials, the parallel speedup, GPU-hours,
    cost and idle time, and TensorBoard logs.

    Examples:

        gpuscout sweep lr.yaml --dry-run

        gpuscout sweep lr.yaml --gpus 0,1,2,3

        gpuscout sweep lr.yaml --resume            # after a crash or Ctrl-C: nothing done twice

        gpuscout sweep lr.yaml --cpu-slots 2       # no GPU: two trials at a time on the CPU

        gpuscout sweep lr.yaml --executor ray --address ray://head:10001
    """
    gpu_list = None
    if gpus is not None:
        try:
            gpu_list = sorted({int(g) for g in gpus.split(",") if g.strip()})
        except ValueError:
            raise UsageError(f"--gpus must be indices like 0,1,2, got {gpus!r}") from None
    options = driver.SweepOptions(gpus=gpu_list, cpu_slots=cpu_slots, executor=executor, address=address,
                                  resume=resume, dry_run=dry_run)
    err = Console(stderr=True)
    with Nvml() as nvml, Store(store_path) as store:
        plan = driver.plan(path, options, nvml, store)
        if dry_run:
            listing = [{"index": t.index, "key": t.key, "params": t.params, "done": t not in plan.todo} for t in plan.trials]
            if as_json:
                typer.echo(json.dumps({"sweep": plan.sweep.name, "slots": [s.label for s in plan.slots], "trials": listing}, indent=2))
            else:
                Console().print(f"sweep {plan.sweep.name}: {len(plan.trials)} trial(s), {len(plan.todo)} to run on "
                                f"{', '.join(s.label for s in plan.slots)}", highlight=False)
                for item in listing:
                    Console().print(f"  {item['index']:4} {json.dumps(item['params'])}" + ("  (done)" if item["done"] else ""),
                                    highlight=False)
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=err, transient=as_json) as progress:
            summary = driver.execute(plan, options, nvml, store, _Live(progress, plan.sweep))
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
    else:
        _print_summary(summary, Console())
    if summary["stopped"] or summary["status_counts"]["ok"] == 0:
        raise typer.Exit(1)
