"""`gpuscout recommend`'s ranking on the terminal."""

from __future__ import annotations

from rich.table import Table

from gpuscout import recommend as rec
from gpuscout.report import format as fmt
from gpuscout.report import terminal


def print_ranking(rows: list[rec.Row], job: rec.Job, constraints: rec.Constraints) -> None:
    out = terminal.console()
    table = Table(title=f"gpuscout recommend: {job.name}, batch {job.batch_size}, {job.precision.value}, "
                        f"{constraints.scenario}", title_justify="left", header_style="bold")
    for name in ("#", "GPU", "fits (per GPU)", f"{job.unit}/s", "time", "cost", f"{job.unit}/$", "USD/h", "why"):
        table.add_column(name, overflow="fold")
    for rank, r in enumerate(rows, 1):
        t = r.throughput
        speed = fmt.DASH if t is None else f"{fmt.number(t.throughput)} [dim]{t.basis}, {fmt.number(t.low)}–{fmt.number(t.high)}[/]"
        fits = f"{'yes' if r.fits else '[red]no[/]'} {r.memory_per_gpu_bytes / 1e9:.1f}/{r.gpu.memory_gb:g} GB"
        style = "" if r.eligible and r.fits else "[dim]"
        table.add_row(f"{rank}" if r.eligible and r.fits else "—", f"{style}{r.gpus}x {r.gpu.name}", fits, speed,
                      fmt.seconds(r.hours * 3600) if r.hours is not None else fmt.DASH,
                      fmt.usd(r.cost_usd),
                      fmt.number(r.units_per_usd) if r.units_per_usd is not None else fmt.DASH,
                      f"{r.hourly.usd_per_hour * r.gpus:.2f}" if r.hourly else fmt.DASH, "; ".join(r.reasons))
    out.print(table)
    for r in rows:  # which stored runs a "measured" figure is (the job's batch and precision only)
        if r.throughput is not None and r.throughput.basis == "measured":
            runs = [label.removeprefix("measured: ") for label in r.throughput.references]
            out.print(f"{r.gpu.name}: measured by {'; '.join(runs)}", highlight=False, markup=False, soft_wrap=True)
    unpriced = [r for r in rows if r.fits and r.hourly is None and r.throughput is not None]
    if unpriced:
        out.print(f"no price known for {', '.join(r.gpu.name for r in unpriced)}: ranked after the priced GPUs, by "
                  "speed; add their price in a --catalog file (docs/catalog.md) to rank them by cost",
                  highlight=False, markup=False, soft_wrap=True)
    out.print(f"memory: {job.memory_basis}. Throughput: measured on this GPU kind in your store, or predicted "
              "(docs/catalog.md: the model and its error).", highlight=False, markup=False)

