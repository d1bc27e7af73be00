"""`gpuscout recommend`: the catalog's GPUs ranked for one job, budget and deadline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gpuscout import catalog as catalog_lib
from gpuscout import recommend as rec
from gpuscout import workloads
from gpuscout.cli.emit import emit
from gpuscout.cli.options import AsJson, Pricing, StorePath, grouped
from gpuscout.cli.stored import warn_unreadable
from gpuscout.core import backends
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision
from gpuscout.recommend import from_run
from gpuscout.recommend.advice import Advice, unreachable
from gpuscout.record.run import RunRecord
from gpuscout.store import Store, default_store_path

HELP = """Rank GPUs for a training job: the answer first (the best value, what the ranking cannot tell
you, what to fix first), then each GPU's throughput (measured or predicted), time and cost to
train; --long adds memory, the range and why. --from RUN takes the job a watched script, a tune
variant or a benchmark ran, and predicts it from where its step time went.

Examples:

    gpuscout recommend --from 1a2b --trials 9 --max-gpus 8

    gpuscout recommend --workload resnet50 --epochs 90 --top 5 --long

    gpuscout recommend --params 1.3B --seq 2048 --dataset-size 2e10 --deadline 3d --max-gpus 8

    gpuscout recommend --workload gpt2_small --budget-usd-per-hour 5 --json

    gpuscout recommend --model my_model.py:build --dataset-size 1e6 --epochs 10

    gpuscout recommend --workload resnet50 --scenario edge --precision mixed_float16
"""


@dataclass
class JobOptions:
    workload: Annotated[
        str | None, typer.Option("--workload", "-w", help="A registered workload (gpuscout bench --list).")
    ] = None
    model: Annotated[str | None, typer.Option("--model", help="Your model: file.py:build or model.keras.")] = None
    params: Annotated[
        str | None, typer.Option("--params", help="A GPT-style model of this many parameters, e.g. 350M, 1.3B.")
    ] = None
    seq: Annotated[int, typer.Option("--seq", help="--params: sequence length.")] = 2048
    layers: Annotated[int | None, typer.Option(help="--params: layers [default: the GPT shape of that size].")] = None
    hidden: Annotated[int | None, typer.Option(help="--params: hidden size [default: the GPT shape of that size].")] = (
        None
    )
    vocab: Annotated[int, typer.Option(help="--params: vocabulary.")] = 50304
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size", help="Global batch (sequences for --params) [default: the workload's; 8 for --params]."
        ),
    ] = None
    scenario: Annotated[str, typer.Option(help="train | infer | edge (edge: GPUs of 75 W or less, and Jetson).")] = (
        "train"
    )
    precision: Annotated[
        str | None,
        typer.Option(help="fp32 | mixed_float16 | mixed_bfloat16 [default: mixed_bfloat16; --from: the run's]."),
    ] = None
    from_run: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="A stored run (watch, tune variant or bench; an id prefix): its own job, predicted from "
            "its bottleneck split.",
        ),
    ] = None

    def check(self) -> Precision:
        if len([x for x in (self.workload, self.model, self.params, self.from_run) if x]) != 1:
            raise UsageError("give exactly one of --workload, --model, --params or --from RUN")
        if self.from_run:
            given = [
                name
                for name, value in (("--precision", self.precision), ("--batch-size", self.batch_size))
                if value is not None
            ]
            if given:
                raise UsageError(
                    f"--from takes the run's own {' and '.join(g[2:] for g in given)}: drop {', '.join(given)} "
                    "(gpuscout tune -- COMMAND measures what another one buys)"
                )
            if self.scenario != "train":
                raise UsageError("--from predicts the run's training: drop --scenario (or use --workload)")
        if self.scenario not in ("train", "infer", "edge"):
            raise UsageError(f"unknown --scenario {self.scenario!r}: choose train, infer or edge")
        for name, value in (
            ("--seq", self.seq),
            ("--batch-size", self.batch_size),
            ("--layers", self.layers),
            ("--hidden", self.hidden),
            ("--vocab", self.vocab),
        ):
            if value is not None and value < 1:  # 0 is no shape (and was taken for "not given")
                raise UsageError(f"{name} must be >= 1, got {value}")
        shape = [
            name
            for name, value in (
                ("--layers", self.layers),
                ("--hidden", self.hidden),
                ("--seq", self.seq if self.seq != 2048 else None),
                ("--vocab", self.vocab if self.vocab != 50304 else None),
            )
            if value is not None
        ]
        if shape and not self.params:
            raise UsageError(
                f"{', '.join(shape)} {'describes' if len(shape) == 1 else 'describe'} a --params model: add "
                "--params (e.g. 1.3B), or drop them"
            )
        return backends.parse_precision(self.precision or "mixed_bfloat16", "--precision")


@dataclass
class Limits:
    budget_usd_per_hour: Annotated[
        float | None, typer.Option(help="Only GPUs (times their count) at or under this USD per hour.")
    ] = None
    budget_usd_total: Annotated[
        float | None, typer.Option(help="Only GPUs whose whole training costs at most this.")
    ] = None
    deadline: Annotated[
        str | None, typer.Option(help="Train within this time, e.g. 12h, 90m, 2d (needs the job's size).")
    ] = None
    epochs: Annotated[
        float | None,
        typer.Option(help="Epochs of the dataset to train [default: 1; --from: the epochs its fit planned]."),
    ] = None
    dataset_size: Annotated[
        float | None,
        typer.Option(help="Samples per epoch (tokens for --params) [default: the workload's reference dataset]."),
    ] = None
    max_gpus: Annotated[int, typer.Option(help="At most this many GPUs of one kind (data parallel).")] = 8
    top: Annotated[int, typer.Option(help="Rows to show (--json has them all).")] = 12
    trials: Annotated[
        int | None,
        typer.Option(
            help="--from: the time and cost of a sweep of this many such trainings on up to --max-gpus GPUs of "
            "each kind."
        ),
    ] = None

    def constraints(self, scenario: str) -> rec.Constraints:
        for name, value in (
            ("--budget-usd-per-hour", self.budget_usd_per_hour),
            ("--budget-usd-total", self.budget_usd_total),
            ("--dataset-size", self.dataset_size),
        ):
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be > 0, got {value:g}")
        for name, value in (
            ("--epochs", self.epochs),
            ("--max-gpus", self.max_gpus),
            ("--top", self.top),
            ("--trials", self.trials),
        ):
            if value is not None and (value <= 0 or (name != "--epochs" and value < 1)):
                raise UsageError(f"{name} must be {'> 0' if name == '--epochs' else '>= 1'}, got {value:g}")
        for name, value, most in (
            ("--epochs", self.epochs, MAX_EPOCHS),
            ("--dataset-size", self.dataset_size, MAX_DATASET_SAMPLES),
            ("--max-gpus", self.max_gpus, MAX_GPUS),
            ("--trials", self.trials, MAX_TRIALS),
        ):
            if value is not None and value > most:
                raise UsageError(f"{name} {value:g} is more than any training gpuscout can plan (at most {most:g})")
        deadline_h = rec.parse_duration_h(self.deadline) if self.deadline else None
        return rec.Constraints(
            scenario, self.budget_usd_per_hour, self.budget_usd_total, deadline_h, self.epochs or 1.0, self.max_gpus
        )


@grouped
def recommend(
    job_options: JobOptions,
    limits: Limits,
    pricing: Pricing,
    catalog_file: Annotated[
        str | None, typer.Option("--catalog", envvar="GPUSCOUT_CATALOG", help="Your own GPUs and prices (TOML).")
    ] = None,
    store_path: StorePath = None,
    as_json: AsJson = False,
    long: Annotated[
        bool, typer.Option("--long", help="Every column: each GPU's memory, the speed's range, units per dollar, why.")
    ] = False,
) -> None:
    precision = job_options.check()
    constraints = limits.constraints(job_options.scenario)
    if limits.trials is not None and not job_options.from_run:
        raise UsageError("--trials prices a sweep of a measured training: give --from RUN (a watched script's run)")
    prices = pricing.options()
    cat = catalog_lib.load(catalog_file)
    answer = None
    if job_options.from_run:
        answer = _from_run(job_options.from_run, store_path, cat, constraints, prices, limits)
        job, rows = answer.job, answer.rows
    else:
        job = _job(job_options, precision, limits.dataset_size, _stored(store_path))
    if constraints.deadline_h and not job.dataset_units:
        raise UsageError("--deadline needs the job's size: give --dataset-size (and --epochs)")
    if answer is None:
        rows = rec.rank(job, cat, constraints, prices)
    advice = Advice(job, rows, constraints, job_options.scenario, answer, limits.top, long)
    problem = unreachable(advice, limits.deadline, limits.max_gpus)
    if problem:
        raise UsageError(problem)
    emit(advice, as_json)


def _from_run(run_id: str, store_path: Path | None, cat, constraints: rec.Constraints, prices, limits: Limits):
    """The stored run's recommendation; exit 2 where the run cannot be found or measured nothing."""
    path = store_path or default_store_path()
    if not Path(path).exists():
        raise UsageError(
            f"no store at {path}: --from reads a run from it (gpuscout watch -- python train.py makes one)"
        )
    with Store(path, readonly=True) as store:
        record = store.get(run_id)
        bench = store.list(kind="benchmark")
        watches = store.list(kind="watch", workload=record.workload) if record.kind == "watch" else []
        sweeps = {name: store.trials(name) for name in store.sweeps()} if limits.trials else {}
    return from_run.recommendation(
        record,
        cat,
        constraints,
        prices,
        bench_records=bench,
        sweeps=sweeps,
        dataset_size=limits.dataset_size,
        epochs=limits.epochs,
        trials=limits.trials,
        watch_records=watches,
    )


def _stored(store_path: Path | None) -> list[RunRecord]:
    """The store's records (its measurements calibrate the predictions); none without a store."""
    path = store_path or default_store_path()
    if not Path(path).exists():
        return []
    with Store(path, readonly=True) as store:
        records = store.list(kind="benchmark")
    warn_unreadable(store)
    return records


# Bounds of what is plausible, so that no figure becomes inf: a million epochs, 10^13 samples (a
# thousand times the largest public image-text set, LAION-5B), and the GPUs of a large cluster.
MAX_EPOCHS = 1e6
MAX_DATASET_SAMPLES = 1e13
MAX_GPUS = 4096
MAX_TRIALS = 100_000  # sweep's own bound on a grid's points


def _job(o: JobOptions, precision: Precision, dataset_size: float | None, records: list[RunRecord]) -> rec.Job:
    if o.workload:
        job = rec.job_for_workload(workloads.get(o.workload).name, precision, o.batch_size, None, records, dataset_size)
    elif o.params:
        job = rec.job_for_params(
            rec.parse_count(o.params), o.seq, o.layers, o.hidden, o.vocab, o.batch_size or 8, precision, dataset_size
        )
    else:
        from gpuscout.workloads import user

        info = user.inspect_in_child(user.parse_ref(o.model), backends.resolve("auto"), precision)
        job = rec.job_for_model(info, precision, o.batch_size, records, dataset_size)
    if o.scenario == "train":
        return job
    measured = []
    if o.workload:
        w = workloads.get(o.workload)
        measured = rec.stored_references(
            records, w.name, precision, w.default_seq_len if w.is_sequence else None, "inference"
        )
    return rec.for_inference(job, measured)
