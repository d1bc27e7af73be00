"""`gpuscout recommend`'s ranking on the terminal."""

from __future__ import annotations

from rich.table import Table

from gpuscout import recommend as rec
from gpuscout.recommend import from_run, sweep_cost
from gpuscout.report import format as fmt
from gpuscout.report import terminal


def print_ranking(rows: list[rec.Row], job: rec.Job, constraints: rec.Constraints) -> None:
    out = terminal.console()
    table = Table(
        title=f"gpuscout recommend: {job.name}, batch {job.batch_size}, {job.precision.value}, {constraints.scenario}",
        title_justify="left",
        header_style="bold",
    )
    for name in ("#", "GPU", "fits (per GPU)", f"{job.unit}/s", "time", "cost", f"{job.unit}/$", "USD/h", "why"):
        table.add_column(name, overflow="fold")
    for rank, r in enumerate(rows, 1):
        t = r.throughput
        speed = (
            fmt.DASH
            if t is None
            else f"{fmt.number(t.throughput)} [dim]{t.basis}, {fmt.number(t.low)}–{fmt.number(t.high)}[/]"
        )
        fits = f"{'yes' if r.fits else '[red]no[/]'} {r.memory_per_gpu_bytes / 1e9:.1f}/{r.gpu.memory_gb:g} GB"
        style = "" if r.eligible and r.fits else "[dim]"
        table.add_row(
            f"{rank}" if r.eligible and r.fits else "—",
            f"{style}{r.gpus}x {r.gpu.name}",
            fits,
            speed,
            fmt.seconds(r.hours * 3600) if r.hours is not None else fmt.DASH,
            fmt.usd(r.cost_usd),
            fmt.number(r.units_per_usd) if r.units_per_usd is not None else fmt.DASH,
            f"{r.hourly.usd_per_hour * r.gpus:.2f}" if r.hourly else fmt.DASH,
            "; ".join(r.reasons),
        )
    out.print(table)
    for r in rows:  # which stored runs a "measured" figure is (the job's batch and precision only)
        if r.throughput is not None and r.throughput.basis == "measured":
            runs = [label.removeprefix("measured: ") for label in r.throughput.references]
            out.print(f"{r.gpu.name}: measured by {'; '.join(runs)}", highlight=False, markup=False)
    unpriced = [r for r in rows if r.fits and r.hourly is None and r.throughput is not None]
    if unpriced:
        out.print(
            f"no price known for {', '.join(r.gpu.name for r in unpriced)}: ranked after the priced GPUs, by "
            "speed; add their price in a --catalog file (docs/catalog.md) to rank them by cost",
            highlight=False,
            markup=False,
        )
    out.print(
        f"memory: {job.memory_basis}. Throughput: measured on this GPU kind in your store, or predicted "
        "(docs/catalog.md: the model and its error).",
        highlight=False,
        markup=False,
    )


# Sweep options shown per GPU kind (--json has them all): the fastest and the cheapest of each.
SWEEP_KINDS_SHOWN = 6


def print_from_run(answer: from_run.Recommendation) -> None:
    """What a --from prediction stands on, the bottleneck to fix first, and the sweep (--trials)."""
    out = terminal.console()
    job, m = answer.job, answer.measured
    plain = dict(highlight=False, markup=False)
    out.print(f"Predicted {answer.basis}.", **plain)
    if job.dataset_units:
        steps = job.dataset_units / job.units_per_sample / job.batch_size
        out.print(
            f"Training: {answer.epochs:g} epoch{'s' if answer.epochs != 1 else ''} x {steps:,.0f} steps x batch "
            f"{job.batch_size} = {job.dataset_units * answer.epochs:,.0f} {job.unit}"
            + (
                f", each epoch +{m.epoch_overhead_s:.1f} s of validation and epoch-end work as measured"
                if m.epoch_overhead_s >= 0.05
                else ""
            ),
            **plain,
        )
    else:
        out.print(
            "Training size unknown (the fit ran until its data ran out, and no epoch finished): give "
            "--dataset-size SAMPLES and --epochs for time and cost",
            **plain,
        )
    if answer.fix_first:
        out.print(f"Fix first: {answer.fix_first}", **plain)
    if answer.sweep is not None:
        print_sweep(answer.sweep)


def print_sweep(estimate: sweep_cost.SweepEstimate) -> None:
    out = terminal.console()
    plain = dict(highlight=False, markup=False)
    fastest, cheapest = estimate.fastest(), estimate.cheapest()
    here = (
        f"{fmt.seconds(estimate.here_h * 3600)} one after another on the {estimate.here}"
        if estimate.here_h is not None
        else f"unknown on the {estimate.here} (the training's size is not known)"
    )
    line = f"{estimate.trials} trials: {here}"
    if fastest is not None:
        line += f"; {_option(fastest)} (fastest)"
    if cheapest is not None and cheapest is not fastest:
        line += f"; {_option(cheapest)} (cheapest)"
    out.print(line + ".", **plain)
    out.print(f"Sweep basis: {estimate.basis}.", **plain)
    if not estimate.options:
        return
    table = Table(title=f"a sweep of {estimate.trials} trials", title_justify="left", header_style="bold")
    for name in ("GPUs", "trials/GPU", "one trial", "wall time", "cost"):
        table.add_column(name, overflow="fold")
    kinds: list[str] = []
    for option in sorted(estimate.options, key=lambda o: (o.cost_usd is None, o.cost_usd or 0, o.wall_h)):
        if option.gpu.id not in kinds:
            kinds.append(option.gpu.id)
    for kind in kinds[:SWEEP_KINDS_SHOWN]:
        mine = [o for o in estimate.options if o.gpu.id == kind]
        fastest = min(mine, key=lambda o: (o.wall_h, o.gpus))
        cheapest = min(mine, key=lambda o: (o.cost_usd or 0, o.wall_h))
        for o in sorted({id(o): o for o in (fastest, cheapest)}.values(), key=lambda o: o.gpus):
            table.add_row(
                f"{o.gpus}x {o.gpu.name}",
                str(o.trials_per_gpu),
                fmt.seconds(o.trial_h * 3600),
                fmt.seconds(o.wall_h * 3600),
                fmt.usd(o.cost_usd),
            )
    out.print(table)


def _option(o: sweep_cost.SweepOption) -> str:
    shared = f", {o.trials_per_gpu} trials per GPU" if o.trials_per_gpu > 1 else ""
    cost = f" at {fmt.usd(o.cost_usd)}" if o.cost_usd is not None else ""
    return f"{fmt.seconds(o.wall_h * 3600)} on {o.gpus}x {o.gpu.name}{cost}{shared}"
