"""`gpuscout recommend`: which GPU for this model, budget and deadline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from gpuscout import backends, recommend as rec, workloads
from gpuscout import catalog as catalog_lib
from gpuscout.cli.stored import warn_unreadable
from gpuscout.errors import UsageError
from gpuscout.cli import pricing_options
from gpuscout.pricing import PricingOptions
from gpuscout.report import format as fmt
from gpuscout.spec import Precision
from gpuscout.store import Store
from gpuscout.store.sqlite import default_store_path


def recommend(
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="A registered workload (gpuscout bench --list)."),
    model: Optional[str] = typer.Option(None, "--model", help="Your model: file.py:build or model.keras."),
    params: Optional[str] = typer.Option(None, "--params", help="A GPT-style model of this many parameters, e.g. 350M, 1.3B."),
    seq: int = typer.Option(2048, "--seq", help="--params: sequence length."),
    layers: Optional[int] = typer.Option(None, help="--params: layers [default: the GPT shape of that size]."),
    hidden: Optional[int] = typer.Option(None, help="--params: hidden size [default: the GPT shape of that size]."),
    vocab: int = typer.Option(50304, help="--params: vocabulary."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Global batch (sequences for --params) [default: the workload's; 8 for --params]."),
    scenario: str = typer.Option("train", help="train | infer | edge (edge: GPUs of 75 W or less, and Jetson)."),
    precision: str = typer.Option("mixed_bfloat16", help="fp32 | mixed_float16 | mixed_bfloat16."),
    budget_usd_per_hour: Optional[float] = typer.Option(None, help="Only GPUs (times their count) at or under this USD per hour."),
    budget_usd_total: Optional[float] = typer.Option(None, help="Only GPUs whose whole training costs at most this."),
    deadline: Optional[str] = typer.Option(None, help="Train within this time, e.g. 12h, 90m, 2d (needs the job's size)."),
    epochs: float = typer.Option(1.0, help="Epochs of the dataset to train."),
    dataset_size: Optional[float] = typer.Option(None, help="Samples per epoch (tokens for --params) [default: the workload's reference dataset]."),
    max_gpus: int = typer.Option(8, help="At most this many GPUs of one kind (data parallel)."),
    price: Optional[float] = typer.Option(None, "--price", help="Cost of one GPU-hour in USD, for every GPU."),
    provider: Optional[str] = typer.Option(None, help="Only this provider's prices (aws, gcp, lambda, ...)."),
    owned: bool = pricing_options.OWNED,
    amortise_years: float = pricing_options.AMORTISE_YEARS,
    electricity_usd_per_kwh: float = pricing_options.ELECTRICITY,
    top: int = typer.Option(12, help="Rows to show (--json has them all)."),
    catalog_file: Optional[str] = typer.Option(None, "--catalog", envvar="GPUSCOUT_CATALOG", help="Your own GPUs and prices (TOML)."),
    store_path: Optional[Path] = typer.Option(None, "--store", envvar="GPUSCOUT_STORE", help="Results store: its measurements calibrate the predictions."),
    as_json: bool = typer.Option(False, "--json", help="Print the ranking as JSON."),
) -> None:
    """Rank GPUs for a training job: fits in memory, throughput (measured or predicted, with a range),
    time and cost to train, throughput per dollar, and why.

    Examples:

        gpuscout recommend --workload resnet50 --epochs 90

        gpuscout recommend --params 1.3B --seq 2048 --dataset-size 2e10 --deadline 3d --max-gpus 8

        gpuscout recommend --workload gpt2_small --budget-usd-per-hour 5 --json

        gpuscout recommend --model my_model.py:build --dataset-size 1e6 --epochs 10

        gpuscout recommend --workload resnet50 --scenario edge --precision mixed_float16
    """
    chosen = [x for x in (workload, model, params) if x]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --workload, --model or --params")
    if scenario not in ("train", "infer", "edge"):
        raise UsageError(f"unknown --scenario {scenario!r}: choose train, infer or edge")
    for name, value in (("--budget-usd-per-hour", budget_usd_per_hour), ("--budget-usd-total", budget_usd_total),
                        ("--dataset-size", dataset_size)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be > 0, got {value:g}")
    if epochs <= 0 or max_gpus < 1 or top < 1 or seq < 1 or (batch_size is not None and batch_size < 1):
        raise UsageError("--epochs, --max-gpus, --top, --seq and --batch-size must be positive")
    try:
        run_precision = Precision(precision)
    except ValueError:
        raise UsageError(f"unknown --precision {precision!r}: choose fp32, mixed_float16 or mixed_bfloat16") from None
    pricing = PricingOptions(price, provider, owned, amortise_years, electricity_usd_per_kwh).check()
    deadline_h = rec.parse_duration_h(deadline) if deadline else None
    cat = catalog_lib.load(catalog_file)
    records = []
    path = store_path or default_store_path()
    if Path(path).exists():
        with Store(path, create=False) as store:
            records = store.list()
        warn_unreadable(store)
    if workload:
        job = rec.job_for_workload(workloads.get(workload).name, run_precision, batch_size, None, records, dataset_size)
    elif params:
        job = rec.job_for_params(rec.parse_count(params), seq, layers, hidden, vocab, batch_size or 8,
                                 run_precision, dataset_size)
    else:
        from gpuscout.workloads import user

        ref = user.parse_ref(model)
        info = user.inspect_in_child(ref, backends.resolve("auto"), run_precision)
        job = rec.job_for_model(info.model_copy(update={"name": user.display_name(ref)}), run_precision,
                                batch_size, records, dataset_size)
    if scenario != "train":
        measured = []
        if workload:
            w = workloads.get(workload)
            measured = rec.stored_references(records, w.name, run_precision,
                                             w.default_seq_len if w.is_sequence else None, "inference")
        job = rec.for_inference(job, measured)
    constraints = rec.Constraints(scenario, budget_usd_per_hour, budget_usd_total, deadline_h, epochs, max_gpus)
    if deadline_h and not job.dataset_units:
        raise UsageError("--deadline needs the job's size: give --dataset-size (and --epochs)")
    rows = rec.rank(job, cat, constraints, pricing)
    if deadline_h and not any(r.eligible or (r.hours is not None and r.hours <= deadline_h) for r in rows):
        timed = [r for r in rows if r.hours is not None]
        closest = min(timed, key=lambda r: r.hours) if timed else None
        raise UsageError(f"no GPU in the catalog trains {job.name} within {deadline}"
                         + (f": the closest is {closest.gpus}x {closest.gpu.name} at {closest.hours:,.1f} h"
                            if closest else "") + f" (with up to {max_gpus} GPUs; raise --max-gpus or the deadline)")
    if as_json:
        typer.echo(json.dumps({"job": {k: v for k, v in job.__dict__.items() if k != "references"}
                               | {"precision": job.precision.value, "references": [r.label for r in job.references]},
                               "scenario": scenario, "rows": [r.to_dict() for r in rows]}, indent=2, default=str))
        return
    _print(rows[:top], job, constraints)


def _print(rows: list[rec.Row], job: rec.Job, constraints: rec.Constraints) -> None:
    out = Console()
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
                      f"{r.cost_usd:,.0f} $" if r.cost_usd is not None else fmt.DASH,
                      fmt.number(r.units_per_usd) if r.units_per_usd is not None else fmt.DASH,
                      f"{r.hourly.usd_per_hour * r.gpus:.2f}" if r.hourly else fmt.DASH, "; ".join(r.reasons))
    out.print(table)
    out.print(f"memory: {job.memory_basis}. Throughput: measured on this GPU kind in your store, or predicted "
              "(docs/catalog.md: the model and its error).", highlight=False)

