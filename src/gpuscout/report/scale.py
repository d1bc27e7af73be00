"""`gpuscout scale`'s report on the terminal: the scaling table, the verdict, and multi-host runs."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.core.units import counted
from gpuscout.report import format as fmt
from gpuscout.scale.results import ClusterPlan, Merged, ScaleReport, WorkerDone

BATCHNORM = {"per_replica": "per GPU", "global": "over the global batch"}


def _ci(low: float | None, high: float | None, digits: int = 2, suffix: str = "") -> str:
    return "" if low is None else f" [{low:.{digits}f}–{high:.{digits}f}{suffix}]"


def print_scale(report: ScaleReport, out: Console) -> None:
    where = report.gpu or "logical CPU devices"
    out.print(
        f"[bold]gpuscout scale[/] {escape(report.workload)}: {report.mode} scaling on {escape(where)} "
        f"({report.backend} {report.precision}, data {report.data}"
        f"{', batch norm ' + BATCHNORM[report.batchnorm] if report.batchnorm else ''}"
        f"{', one worker process per device' if report.local_workers else ''}), session {report.session}, "
        f"{report.elapsed_s / 60:.1f} min",
        highlight=False,
    )
    for note in report.notes:
        out.print(f"note: {note}", highlight=False, markup=False)
    if report.interconnect:
        out.print(f"interconnect: {report.interconnect.detail}", highlight=False, markup=False)
    t = Table(title="throughput against devices (95% CI)", title_justify="left")
    points = report.points
    show_allreduce = any(p.allreduce_estimate_s for p in points)
    show_gpus = any(p.per_gpu for p in points)
    for c in (
        ("devices", "batch/device", "samples/s", "speedup", "efficiency", "outside compute")
        + (("all-reduce ≥",) if show_allreduce else ())
        + (("per GPU util/W/MHz",) if show_gpus else ())
        + ("run",)
    ):
        t.add_column(c)
    for p in points:
        ci = p.ci95 or [None, None]
        if not p.speedup:
            speed = fmt.DASH
        elif p.devices == 1:
            speed = "1.00x"
        else:
            speed = f"{p.speedup.ratio:.2f}x" + _ci(p.speedup.ci95_low, p.speedup.ci95_high)
        eff = (
            fmt.DASH
            if not p.efficiency
            else (
                f"{p.efficiency.value:.0%}"
                + ("" if p.devices == 1 else (" [green]ok[/]" if p.meets_expectation else " [red]low[/]"))
            )
        )
        outside = (
            fmt.DASH
            if p.outside_compute_s is None
            else (f"{fmt.seconds(p.outside_compute_s)} ({p.outside_compute_share:.0%})")
        )
        per_gpu = (
            " ".join(
                f"{g.index}:{fmt.number(g.gpu_util_mean_pct, 0)}%/{fmt.number(g.power_mean_w, 0)}/"
                f"{fmt.number(g.sm_clock_mean_mhz, 0)}"
                for g in p.per_gpu
            )
            or fmt.DASH
        )
        row = [
            str(p.devices),
            str(p.per_device_batch_size),
            fmt.number(p.samples_per_s) + (_ci(ci[0], ci[1], 0) if ci[0] is not None else ""),
            speed,
            eff,
            outside,
        ]
        row += [fmt.seconds(p.allreduce_estimate_s)] if show_allreduce else []
        row += [per_gpu] if show_gpus else []
        row.append(p.run_id if p.status == "ok" else f"{p.status} ({p.run_id})")
        t.add_row(*row)
    out.print(t)
    v = report.verdict
    # the summary carries run errors and XLA/NCCL settings as the user wrote them: never markup
    out.print(("[green]verdict[/]: " if v.ok else "[red]verdict[/]: ") + escape(v.summary), highlight=False)
    for p in report.points:
        each = p.each_alone
        if each:
            alone = ", ".join(f"GPU {g} {fmt.number(rate)}" for g, rate in each.alone_samples_per_s.items())
            out.print(
                f"  {p.devices} devices against each GPU alone ({alone} samples/s): {each.value:.1%}"
                f"{_ci(each.ci95_low * 100, each.ci95_high * 100, 1, '%')} efficiency",
                highlight=False,
                markup=False,
            )
        for c in p.causes:
            out.print(f"  {p.devices} devices — {c.message}", highlight=False, markup=False)
    for i, what in enumerate(v.try_, 1):
        out.print(f"try {i}: {what}", highlight=False, markup=False)


def print_plan(plan: ClusterPlan, out: Console) -> None:
    out.print(
        f"cluster {plan.cluster}: run on each host (the same gpuscout and TensorFlow; ports open between them):",
        markup=False,
        soft_wrap=True,
    )
    for w in plan.workers:
        out.print(f"  # {w.host}\n  {w.command}", markup=False, soft_wrap=True)
    out.print("then bring the records together:")
    for line in plan.then:
        out.print(f"  {line}", markup=False, soft_wrap=True)


def print_worker(done: WorkerDone, out: Console) -> None:
    record = done.record
    cluster_id = record.cluster.id
    out.print(
        f"worker {record.cluster.index}: {record.status}, run {record.id} stored in {done.store}. Next: worker "
        f"0's host imports the others' `gpuscout results export --group {cluster_id}` and runs "
        f"`gpuscout scale --merge {cluster_id}`",
        markup=False,
    )


def print_merged(merged: Merged, out: Console) -> None:
    record = merged.record
    d = record.distribution
    if not record.ok:
        out.print(
            f"[red]cluster run {escape(record.cluster.id)} {record.status}[/]: {escape(record.error.message or '')}",
            highlight=False,
        )
        return
    t = record.throughput
    out.print(
        f"cluster {record.cluster.id}: {record.workload} on {counted(d.workers, 'worker')}, "
        f"{record.devices} devices, global batch {record.batch_size}: {fmt.number(t.median)} {t.unit}"
        f"{_ci(t.ci95_low, t.ci95_high, 0)}; stored as run {record.id} "
        f"(workers' runs {', '.join(d.worker_run_ids)})",
        highlight=False,
        markup=False,
    )
