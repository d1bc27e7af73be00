"""`gpuscout scale`: speedup and efficiency over this host's GPUs, a verdict, and multi-host runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuscout import cluster, engine
from gpuscout import scale as scale_lib
from gpuscout.cli.session_report import save_and_show
from gpuscout.errors import UsageError
from gpuscout.record.run import RunRecord
from gpuscout.report import format as fmt
from gpuscout.spec import RunSpec
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml


class _RichProgress(engine.Progress):
    def __init__(self, progress: Progress) -> None:
        self.progress, self.task, self.label = progress, None, ""

    def run_started(self, spec: RunSpec, label: str, number: int, total: int) -> None:
        self.label = label
        self.task = self.progress.add_task(f"{label}: starting", total=spec.windows)

    def event(self, spec: RunSpec, event: dict) -> None:
        if event.get("event") == "compiled":
            self.progress.update(self.task, description=f"{self.label}: compiled in {event['compile_s']:.1f} s")
        elif event.get("event") == "window":
            self.progress.update(self.task, advance=1, description=f"{self.label}: {event['throughput']:,.1f}/s")

    def run_finished(self, label: str, records: list[RunRecord]) -> None:
        self.progress.update(self.task, description=f"{label}: {records[0].status if records else 'done'}",
                             completed=self.progress.tasks[-1].total)


def _ci(low: float | None, high: float | None, digits: int = 2, suffix: str = "") -> str:
    return "" if low is None else f" [{low:.{digits}f}–{high:.{digits}f}{suffix}]"


def _print(report: dict, out: Console) -> None:
    where = report["gpu"] or "logical CPU devices"
    out.print(f"[bold]gpuscout scale[/] {report['workload']}: {report['mode']} scaling on {where} "
              f"({report['backend']} {report['precision']}, data {report['data']}"
              f"{', one worker process per device' if report['local_workers'] else ''}), session {report['session']}, "
              f"{report['elapsed_s'] / 60:.1f} min", highlight=False)
    for note in report["notes"]:
        out.print(f"note: {note}", highlight=False)
    if report["interconnect"]:
        out.print(f"interconnect: {report['interconnect']['detail']}", highlight=False)
    t = Table(title="throughput against devices (95% CI)", title_justify="left")
    points = report["points"]
    show_allreduce = any(p["allreduce_estimate_s"] for p in points)
    show_gpus = any(p["per_gpu"] for p in points)
    for c in ("devices", "batch/device", "samples/s", "speedup", "efficiency", "outside compute") + (
            ("all-reduce ≥",) if show_allreduce else ()) + (("per GPU util/W/MHz",) if show_gpus else ()) + ("run",):
        t.add_column(c)
    for p in points:
        ci = p["ci95"] or [None, None]
        if not p["speedup"]:
            speed = fmt.DASH
        elif p["devices"] == 1:
            speed = "1.00x"
        else:
            speed = f"{p['speedup']['ratio']:.2f}x" + _ci(p["speedup"]["ci95_low"], p["speedup"]["ci95_high"])
        eff = fmt.DASH if not p["efficiency"] else (
            f"{p['efficiency']['value']:.0%}" + ("" if p["devices"] == 1 else
                                                 (" [green]ok[/]" if p["meets_expectation"] else " [red]low[/]")))
        outside = fmt.DASH if p["outside_compute_s"] is None else (
            f"{fmt.seconds(p['outside_compute_s'])} ({p['outside_compute_share']:.0%})")
        per_gpu = " ".join(f"{g['index']}:{fmt.number(g['gpu_util_mean_pct'], 0)}%/{fmt.number(g['power_mean_w'], 0)}/"
                           f"{fmt.number(g['sm_clock_mean_mhz'], 0)}" for g in p["per_gpu"]) or fmt.DASH
        row = [str(p["devices"]), str(p["per_device_batch_size"]),
               fmt.number(p["samples_per_s"]) + (_ci(ci[0], ci[1], 0) if ci[0] is not None else ""),
               speed, eff, outside]
        row += [fmt.seconds(p["allreduce_estimate_s"])] if show_allreduce else []
        row += [per_gpu] if show_gpus else []
        row.append(p["run_id"] if p["status"] == "ok" else f"{p['status']} ({p['run_id']})")
        t.add_row(*row)
    out.print(t)
    v = report["verdict"]
    out.print(("[green]verdict[/]: " if v["ok"] else "[red]verdict[/]: ") + v["summary"], highlight=False)
    for p in report["points"]:
        for c in p["causes"]:
            out.print(f"  {p['devices']} devices — {c['message']}", highlight=False)
    for i, what in enumerate(v["try"], 1):
        out.print(f"try {i}: {what}", highlight=False)


def _print_merged(record: RunRecord, out: Console) -> None:
    d = record.distribution
    if not record.ok:
        out.print(f"[red]cluster run {record.cluster.id} {record.status}[/]: {escape(record.error.message or '')}",
                  highlight=False)
        return
    t = record.throughput
    out.print(f"cluster {record.cluster.id}: {record.workload} on {d.workers} workers, "
              f"{record.devices} devices, global batch {record.batch_size}: {fmt.number(t.median)} {t.unit}"
              f"{_ci(t.ci95_low, t.ci95_high, 0)}; stored as run {record.id} "
              f"(workers' runs {', '.join(d.worker_run_ids)})", highlight=False)


def scale(
    workload: Optional[str] = typer.Argument(None, help="A registered workload."),
    gpus: str = typer.Option("1,2", "--gpus", help="GPU counts to measure, e.g. 1,2,4 (1 is always measured)."),
    mode: str = typer.Option("weak", help="weak: per-GPU batch fixed, global batch grows; strong: global batch fixed, split."),
    backend: str = typer.Option("auto", help="auto | tensorflow (MirroredStrategy, NCCL) | jax (keras.distribution.DataParallel)."),
    precision: str = typer.Option("fp32", help="fp32 | mixed_float16 | mixed_bfloat16."),
    xla: Optional[bool] = typer.Option(None, "--xla/--no-xla", help="[default: on for jax; tensorflow strategies run without it, as Keras does]."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Weak: per-GPU batch; strong: global batch [default: the workload's]."),
    seq_len: Optional[int] = typer.Option(None, help="Sequence length of token workloads."),
    data: str = typer.Option("synthetic", help="synthetic | pipeline | naive (a host input pipeline per worker)."),
    gpu_ids: Optional[str] = typer.Option(None, "--gpu-ids", help="Which GPUs, e.g. 0,2,3; a count N takes the first N [default: all]."),
    cpu: bool = typer.Option(False, "--cpu", help="Scale over logical CPU devices (checks the code path, not scaling)."),
    local_workers: bool = typer.Option(False, "--local-workers", help="Run each count N as N MultiWorkerMirroredStrategy processes on this host (tensorflow)."),
    hosts: Optional[str] = typer.Option(None, help="host:port,host:port: print the command each host runs for a multi-host run."),
    worker: bool = typer.Option(False, "--worker", help="Run this host's part of a multi-host run (TF_CONFIG set; see --hosts)."),
    cluster_id: Optional[str] = typer.Option(None, "--cluster", help="With --worker: the run's cluster id (printed by --hosts)."),
    merge: Optional[str] = typer.Option(None, "--merge", help="Merge the stored worker records of this cluster id into one run."),
    windows: int = typer.Option(5, help="Timing windows per run."),
    window_seconds: float = typer.Option(2.0, help="Minimum seconds per window."),
    warmup_steps: int = typer.Option(10, help="Warm-up steps per run."),
    timeout: float = typer.Option(scale_lib.DEFAULT_TIMEOUT_S, help="Seconds before a run (a hung collective) is killed and recorded as timeout."),
    fit_check: bool = typer.Option(True, "--fit-check/--no-fit-check", help="Refuse per-GPU batches clearly over the GPU's memory."),
    store_path: Optional[Path] = typer.Option(None, "--store", envvar="GPUSCOUT_STORE", help="Results store (SQLite)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Measure how training speeds up over this host's GPUs: throughput with its CI, speedup and
    efficiency against one GPU, time per step outside compute, per-GPU telemetry, the NVLink/PCIe
    topology, and a verdict with the likely cause and what to try.

    Every run is stored (tagged with the session); the report is saved as JSON beside the store;
    `gpuscout report` plots it.

    Examples:

        gpuscout scale resnet50 --gpus 1,2,4 --backend jax

        gpuscout scale bert_base --gpus 1,2 --mode strong --batch-size 256

        gpuscout scale mlp --cpu --gpus 1,2 --backend tensorflow      # the code path, on the CPU

        gpuscout scale mlp --cpu --gpus 1,2 --backend tensorflow --local-workers   # MultiWorkerMirrored, 2 processes

        gpuscout scale resnet50 --backend tensorflow --hosts gpu-a:2222,gpu-b:2222 --gpus 8   # prints per-host commands
    """
    err = Console(stderr=True)
    modes = [name for name, on in (("--hosts", hosts), ("--worker", worker), ("--merge", merge)) if on]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} exclude each other: use one")
    if merge:
        if workload:
            raise UsageError("--merge takes the cluster id alone; the workload comes from the records")
        with Store(store_path, create=False) as store:
            record = scale_lib.merge(merge, store)
        typer.echo(record.model_dump_json(indent=2)) if as_json else _print_merged(record, Console())
        raise typer.Exit(0 if record.ok else 1)
    if not workload:
        raise UsageError("name a workload, e.g. `gpuscout scale resnet50 --gpus 1,2`")
    options = scale_lib.ScaleOptions(
        counts=scale_lib.parse_counts(gpus), mode=mode, backend=backend, precision=precision, xla=xla,
        batch_size=batch_size, seq_len=seq_len, data=data, gpu_ids=scale_lib.parse_ids(gpu_ids), cpu=cpu,
        local_workers=local_workers, warmup_steps=warmup_steps, windows=windows, window_seconds=window_seconds,
        timeout_s=timeout, fit_check=fit_check)
    if hosts:
        listed = cluster.check_hosts(hosts)
        if backend not in ("tensorflow", "auto"):
            raise UsageError("multi-host runs use MultiWorkerMirroredStrategy: --backend tensorflow")
        passed = ["--gpus", gpus, "--mode", mode, "--backend", "tensorflow", "--precision", precision,
                  "--data", data, "--windows", str(windows), "--window-seconds", f"{window_seconds:g}",
                  "--warmup-steps", str(warmup_steps), "--timeout", f"{timeout:g}"]
        passed += ["--batch-size", str(batch_size)] if batch_size else []
        passed += ["--seq-len", str(seq_len)] if seq_len else []
        passed += ["--gpu-ids", gpu_ids] if gpu_ids else []
        passed += ["--cpu"] if cpu else []
        plan = cluster.commands(workload, listed, passed)
        if as_json:
            typer.echo(json.dumps(plan, indent=2))
            return
        out = Console(highlight=False, soft_wrap=True)
        out.print(f"cluster {plan['cluster']}: run on each host (the same gpuscout and TensorFlow; ports open between them):")
        for w in plan["workers"]:
            out.print(f"  # {w['host']}\n  {w['command']}", markup=False)
        out.print("then bring the records together:")
        for line in plan["then"]:
            out.print(f"  {line}", markup=False)
        return
    if cluster_id and not worker:
        raise UsageError("--cluster goes with --worker")
    with Nvml() as nvml, Store(store_path) as store:
        if worker:
            if not cluster_id:
                raise UsageError("--worker needs --cluster ID (printed by --hosts)")
            with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                          transient=as_json) as progress:
                record = scale_lib.run_worker(workload, options, cluster_id, nvml, store, _RichProgress(progress))
            if as_json:
                typer.echo(record.model_dump_json(indent=2))
            else:
                err.print(f"worker {record.cluster.index}: {record.status}, run {record.id} stored in "
                          f"{store.path}. Next: worker 0's host imports the others' `gpuscout results export --group "
                          f"{cluster_id}` and runs `gpuscout scale --merge {cluster_id}`")
            raise typer.Exit(0 if record.ok else 1)
        the_plan = scale_lib.plan(workload, options, nvml)
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                      transient=as_json) as progress:
            report = scale_lib.run_scale(the_plan, options, nvml, store, _RichProgress(progress))
    save_and_show(report, "scale", store.path, as_json, _print)
    failed = any(p["status"] != "ok" for p in report["points"])
    raise typer.Exit(1 if failed else 0)

