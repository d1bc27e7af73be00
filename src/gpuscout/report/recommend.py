"""`gpuscout recommend`'s ranking on the terminal."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from gpuscout import recommend as rec
from gpuscout.core.units import counted
from gpuscout.recommend import from_run, sweep_cost
from gpuscout.recommend.advice import Advice
from gpuscout.recommend.caveats import rough
from gpuscout.report import format as fmt
from gpuscout.report import terminal


def print_ranking(
    rows: list[rec.Row],
    job: rec.Job,
    constraints: rec.Constraints,
    caveats: list[str] = (),
    fix_first: str | None = None,
    long: bool = False,
    top: int | None = None,
    lead: str | None = None,
) -> None:
    """The answer first (issue 62: at 80 columns the sentence that mattered came last, after 200
    lines of cards): the best value and the fastest GPU in a line, then what makes the ranking
    mean less than it seems (recommend/caveats.py) and what to fix first, then a table that fits
    80 columns. `long`: every column, each row's range, memory and why; `top`: the rows shown (the
    line above them is of all); `lead`: said before the answer, that the run cannot judge a GPU
    (recommend/caveats.cannot_judge), whose figures are then given to two digits."""
    out = terminal.console()
    plain = dict(highlight=False, markup=False)
    out.print(
        f"gpuscout recommend: {job.name}, batch {job.batch_size}, {job.precision.value}, {constraints.scenario}",
        style="bold",
        **plain,
    )
    speed = _speed(job)
    for line in (lead, _conclusion(rows), *caveats, f"Fix first: {fix_first}" if fix_first else None):
        if line:
            out.print(line, **plain)
    rows = rows[:top]
    out.print(_long_table(rows, job, speed) if long else _table(rows, job, speed))
    if long:
        for r in rows:  # which stored runs a "measured" figure is (the job's batch and precision only)
            if r.throughput is not None and r.throughput.basis == "measured":
                runs = [label.removeprefix("measured: ") for label in r.throughput.references]
                out.print(f"{r.gpu.name}: measured by {'; '.join(runs)}", **plain)
        out.print(
            f"memory: {job.memory_basis}. Throughput: measured on this GPU kind in your store, or predicted "
            "(docs/catalog.md: the model and its error).",
            **plain,
        )
    else:
        stale = sum(1 for r in rows if r.hourly is not None and r.hourly.stale)
        out.print(
            f"{job.unit}/s: measured in your store, published, or predicted from other GPUs (docs/catalog.md)"
            + (f"; {stale} of {len(rows)} prices {'is' if stale == 1 else 'are'} over a year old" if stale else "")
            + ". --long: each row's range, memory and why; --json: everything.",
            **plain,
        )
    unpriced = [r for r in rows if r.fits and r.hourly is None and r.throughput is not None]
    if unpriced:
        out.print(
            f"no price known for {', '.join(terminal.kept_whole([r.gpu.short_name for r in unpriced]))}: ranked "
            "after the priced "
            "GPUs, by speed; add their price in a --catalog file (docs/catalog.md) to rank them by cost",
            **plain,
        )


def _speed(job: rec.Job):
    """How a figure of this job reads: to two digits where it rests on no GPU's measurement."""
    return fmt.about if rough(job) else fmt.number


def _ranked(r: rec.Row) -> bool:
    return r.eligible and r.fits


# The fastest is named beside the best value only when it is this much faster: within a quarter, the
# predictions' own error (docs/catalog.md) cannot tell them apart
FASTER_WORTH_SAYING = 1.25


def _conclusion(rows: list[rec.Row]) -> str | None:
    """Best value (the ranking's first) and the fastest, a line each: at 80 columns one line of both
    broke inside a GPU's name (issue 78: "Fastest: 1x B200 180GB" / "(HGX)")."""
    ranked = [r for r in rows if _ranked(r) and r.throughput is not None]
    if not ranked:
        return "No GPU in the catalog fits this job within the limits given: see each row's why with --long."
    best = ranked[0]
    fastest = max(ranked, key=lambda r: r.throughput.throughput)

    def said(r: rec.Row) -> str:
        parts = [fmt.seconds(r.hours * 3600) if r.hours is not None else None, _cost(r)]
        figures = ", ".join(p for p in parts if p and p != fmt.DASH)
        name = terminal.kept_whole([f"{r.gpus}x {r.gpu.short_name}"])[0]
        return name + (f" ({figures}, {r.throughput.basis})" if figures else "")

    line = f"Best value: {said(best)}."
    if fastest.throughput.throughput > FASTER_WORTH_SAYING * best.throughput.throughput:
        line += f"\nFastest: {said(fastest)}."
    return line


def _cost(r: rec.Row) -> str:
    if r.cost_usd is not None:
        return fmt.usd(r.cost_usd)
    return f"{r.usd_per_hour:.2f} USD/h" if r.hourly else fmt.DASH


def _table(rows: list[rec.Row], job: rec.Job, speed=fmt.number) -> Table:
    """Seven narrow columns: rank, GPU, speed and its basis, time, cost, price an hour."""
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for name in ("#", "GPU", f"{job.unit}/s", "basis", "time", "cost", "USD/h"):
        table.add_column(name, justify="right" if name in (f"{job.unit}/s", "time", "cost", "USD/h") else "left")
    for rank, r in enumerate(rows, 1):
        t = r.throughput
        table.add_row(
            f"{rank}" if _ranked(r) else "—",
            f"{r.gpus}x {r.gpu.short_name}" + ("" if r.fits else " [red](no fit)[/]"),
            speed(t.throughput) if t else fmt.DASH,
            t.basis if t else fmt.DASH,
            fmt.seconds(r.hours * 3600) if r.hours is not None else fmt.DASH,
            fmt.usd(r.cost_usd),
            f"{r.usd_per_hour:.2f}" if r.hourly else fmt.DASH,
        )
    return table


def _long_table(rows: list[rec.Row], job: rec.Job, speed=fmt.number) -> Table:
    table = Table(header_style="bold")
    for name in ("#", "GPU", "fits (per GPU)", f"{job.unit}/s", "time", "cost", f"{job.unit}/$", "USD/h", "why"):
        table.add_column(name, overflow="fold")
    for rank, r in enumerate(rows, 1):
        t = r.throughput
        figure = fmt.DASH if t is None else f"{speed(t.throughput)} [dim]{t.basis}, {speed(t.low)}–{speed(t.high)}[/]"
        style = "" if _ranked(r) else "[dim]"
        table.add_row(
            f"{rank}" if _ranked(r) else "—",
            f"{style}{r.gpus}x {r.gpu.name}",
            f"{'yes' if r.fits else '[red]no[/]'} {_gb(r.memory_per_gpu_bytes)}/{r.gpu.memory_gb:g} GB",
            figure,
            fmt.seconds(r.hours * 3600) if r.hours is not None else fmt.DASH,
            fmt.usd(r.cost_usd),
            speed(r.units_per_usd) if r.units_per_usd is not None else fmt.DASH,
            f"{r.usd_per_hour:.2f}" if r.hourly else fmt.DASH,
            "; ".join(r.reasons),
        )
    return table


def _gb(value: float) -> str:
    """GB with one decimal; under 0.05 GB "<0.1" (issue 62: "fits 0.0/16 GB" for a small model)."""
    return "<0.1" if 0 < value < 0.05e9 else f"{value / 1e9:.1f}"


# Sweep options shown per GPU kind (--json has them all): the fastest and the cheapest of each.
SWEEP_KINDS_SHOWN = 6


def print_from_run(answer: from_run.Recommendation) -> None:
    """What a --from prediction stands on and the sweep (--trials); its fix first is said before
    the table (print_ranking)."""
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
    line = f"{counted(estimate.trials, 'trial')}: {here}"
    if fastest is not None:
        line += f"; {_option(fastest)} (fastest)"
    if cheapest is not None and cheapest is not fastest:
        line += f"; {_option(cheapest)} (cheapest)"
    out.print(line + ".", **plain)
    out.print(f"Sweep basis: {estimate.basis}.", **plain)
    if not estimate.options:
        return
    table = Table(title=f"a sweep of {counted(estimate.trials, 'trial')}", title_justify="left", header_style="bold")
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


def print_advice(advice: Advice, out: Console) -> None:
    """`recommend` on the terminal: a measured run's warning first, the ranking (its --top rows),
    the GPUs cut that have no price, then what the run's own measurement predicts."""
    answer = advice.answer
    if answer is not None and answer.measured.ended:  # before the table, not only after it
        terminal.console(stderr=True).print(f"warning: {answer.measured.ended}", markup=False, highlight=False)
    fix_first = answer.fix_first if answer else None
    print_ranking(
        advice.rows, advice.job, advice.constraints, advice.notes, fix_first, advice.long, advice.top, advice.lead
    )
    if advice.unpriced:
        names = ", ".join(terminal.kept_whole(list(dict.fromkeys(r.gpu.short_name for r in advice.unpriced))))
        out.print(
            f"also trains it, with no price in the catalog to rank by: {names} "
            f"(--top {len(advice.rows)} shows them; --json has every row)",
            markup=False,
            highlight=False,
        )
    if answer is not None:
        print_from_run(answer)
