"""`gpuscout bench`: parse, validate, run, store, report."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpuscout import bench as bench_lib
from gpuscout import infer as infer_lib
from gpuscout import engine, suites, workloads
from gpuscout.errors import UsageError
from gpuscout.cli import pricing_options
from gpuscout.pricing import PricingOptions
from gpuscout.record.run import RunRecord
from gpuscout.report import console as console_report
from gpuscout.report.export import json_document
from gpuscout.spec import RunSpec
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml


class _RichProgress(engine.Progress):
    """One bar per run: compile, warm-up, then one tick per timing window."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = None

    def run_started(self, spec: RunSpec, label: str, number: int, total: int) -> None:
        self.label = f"[{number}/{total}] {label}"
        if spec.inference:
            ticks = len(spec.inference.batch_sizes)
        else:
            ticks = spec.to_accuracy.max_epochs if spec.to_accuracy else spec.windows
        self.task = self.progress.add_task(f"{self.label}: starting", total=ticks)

    def event(self, spec: RunSpec, event: dict) -> None:
        kind = event.get("event")
        if kind == "compiled":
            self.progress.update(self.task, description=f"{self.label}: compiled in "
                                 f"{event['compile_s']:.1f} s, warming up")
        elif kind == "prepared":
            self.progress.update(self.task, description=f"{self.label}: ready in {event['prepare_s']:.1f} s")
        elif kind == "warmed_up":
            self.progress.update(self.task, description=f"{self.label}: measuring "
                                 f"({event['steps_per_window']} steps/window)")
        elif kind == "epoch":
            self.progress.update(self.task, advance=1, description=f"{self.label}: epoch {event['epoch']}/"
                                 f"{event['of']} val accuracy {event['val_accuracy']:.4f} (target {event['target']:g}), "
                                 f"{event['elapsed_s']:.0f} s")
        elif kind == "window":
            what = "batch size" if spec.inference else "window"
            self.progress.update(self.task, advance=1, description=f"{self.label}: {what} "
                                 f"{event['index'] + 1}/{event['of']} {event['throughput']:,.1f}/s")

    def run_finished(self, label: str, records: list[RunRecord]) -> None:
        self.progress.update(self.task, description=f"{self.label}: {records[0].status if records else 'done'}")


def parse_batch_size(text: str | None) -> int | str | None:
    if text is None or text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--batch-size must be a whole number or auto, got {text!r}") from None


def bench(
    workload_names: Optional[list[str]] = typer.Argument(None, metavar="WORKLOAD",
                                                         help="Workloads to run (see --list)."),
    backend: str = typer.Option("auto", help="auto | tensorflow | jax (auto: first installed)."),
    precision: str = typer.Option("fp32", help="fp32 | mixed_float16 | mixed_bfloat16."),
    xla: bool = typer.Option(True, "--xla/--no-xla", help="XLA-compile the train step (tensorflow; jax always does)."),
    batch_size: Optional[str] = typer.Option(None, "--batch-size", "-b", help="Global batch size, or auto: the workload's default scaled to the GPU's memory [default: the workload's]."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length of token workloads [default: the workload's]."),
    data: str = typer.Option("synthetic", help="synthetic (device-resident) | pipeline (tuned host pipeline: parallel map, prefetch) | naive (the same on one thread)."),
    model: Optional[str] = typer.Option(None, "--model", help="Your own model: file.py:build (returns the model and a gpuscout.InputSpec) or model.keras."),
    input_shape: Optional[str] = typer.Option(None, "--input-shape", help="Per-sample input shape of a .keras model with free dimensions, e.g. 32,32,3."),
    flops_per_sample: Optional[float] = typer.Option(None, "--flops-per-sample", help="Forward FLOPs per sample of --model (2 per multiply-add) [default: counted from its layers]."),
    to_accuracy: Optional[float] = typer.Option(None, "--to-accuracy", help="Train on --dataset until this validation accuracy (e.g. 0.94) and record the time it took."),
    dataset: Optional[str] = typer.Option(None, help="Real data for --to-accuracy: cifar10 | mnist (Keras' cache) | digits (scikit-learn) | FILE.npz | DIR."),
    max_epochs: int = typer.Option(30, help="--to-accuracy: give up after this many epochs (status not_reached)."),
    suite: Optional[str] = typer.Option(None, help="Run a named suite instead of naming workloads: quick | standard."),
    windows: Optional[int] = typer.Option(None, help="Timing windows [default: 5, or the suite's]."),
    warmup_steps: Optional[int] = typer.Option(None, help="Steps run and discarded after the compile step [default: 10, or the suite's]."),
    window_steps: int = typer.Option(10, help="Minimum steps per window."),
    window_seconds: Optional[float] = typer.Option(None, help="Minimum seconds per window [default: 2, or the suite's]."),
    pipeline_cost: int = typer.Option(1, help="pipeline mode: augmentation passes per sample (host cost)."),
    repeats: int = typer.Option(1, help="Independent runs (fresh processes) of each workload."),
    gpu: Optional[int] = typer.Option(None, help="GPU index to run on [default: 0 when there is a GPU]."),
    cpu: bool = typer.Option(False, "--cpu", help="Run on the CPU even when a GPU is present."),
    timeout: float = typer.Option(bench_lib.DEFAULT_TIMEOUT_S, help="Seconds before a run is killed and recorded as timeout."),
    telemetry: bool = typer.Option(True, "--telemetry/--no-telemetry", help="Sample GPU telemetry (NVML) during runs."),
    seed: int = typer.Option(0, help="Seed for weights and synthetic data."),
    price: Optional[float] = typer.Option(None, "--price", help="Cost of one GPU-hour in USD, instead of the catalog's."),
    provider: Optional[str] = typer.Option(None, help="Use this cloud provider's catalog price (aws, gcp, lambda, or one from your --catalog)."),
    owned: bool = pricing_options.OWNED,
    amortise_years: float = pricing_options.AMORTISE_YEARS,
    electricity_usd_per_kwh: float = pricing_options.ELECTRICITY,
    fit_check: bool = typer.Option(True, "--fit-check/--no-fit-check",
                                   help="Refuse a run whose memory estimate is clearly over the GPU's memory."),
    store_path: Optional[Path] = typer.Option(None, "--store", envvar="GPUSCOUT_STORE",
                                              help="Results store (SQLite) [default: user data dir]."),
    as_json: bool = typer.Option(False, "--json", help="Print the records as one JSON object."),
    list_workloads: bool = typer.Option(False, "--list", help="List the workloads and exit."),
    mode: str = typer.Option("training", help="training | inference (latency per batch size, deployment formats)."),
    batch_sizes: str = typer.Option("1,8,32,128", "--batch-sizes", help="inference: the batch sizes of the requests."),
    serve_format: str = typer.Option("keras", "--format", help="inference: keras | saved_model | litert | onnx | tensorrt, or several: keras,litert."),
    litert_variants: str = typer.Option("fp32,fp16,int8_dynamic,int8", "--litert-variants", help="inference --format litert: which conversions."),
    requests: int = typer.Option(200, help="inference: timed requests per batch size."),
    warmup_requests: int = typer.Option(20, help="inference: requests discarded first (the first compiles)."),
    concurrency: int = typer.Option(0, help="inference: closed-loop clients of a load test at the smallest batch (0: none)."),
    load_seconds: float = typer.Option(5.0, help="inference: length of the load test."),
    latency_target_ms: Optional[float] = typer.Option(None, "--latency-target-ms", help="inference: the p99 latency to meet; says which batch gives the most within it."),
) -> None:
    """Benchmark training under the fixed protocol: compile apart, warm-up discarded, timed windows.

    Exits 0 when every run succeeded, 1 when a run ended oom/failed/timeout (or missed its
    --to-accuracy target: not_reached), 2 on bad input.

    Examples:

        gpuscout bench resnet50 --precision mixed_bfloat16 --batch-size 256

        gpuscout bench resnet18_cifar mlp --backend jax --repeats 3 --json

        gpuscout bench gpt2_small bert_base vit_b16 --precision mixed_bfloat16

        gpuscout bench --suite quick --precision mixed_bfloat16   # every workload, a few minutes on a GPU

        gpuscout bench bert_base --seq-len 512 --batch-size 32

        gpuscout bench vit_b16 --batch-size auto --precision mixed_bfloat16   # as large as this GPU allows

        gpuscout bench resnet18_cifar --to-accuracy 0.94 --dataset cifar10 --precision mixed_bfloat16

        gpuscout bench --model my_model.py:build --precision mixed_bfloat16   # your own model

        gpuscout bench --model saved.keras --input-shape 128,128,3 --batch-size 64

        gpuscout bench resnet50 --data pipeline --pipeline-cost 4   # is the input pipeline the limit?

        gpuscout bench mlp --cpu --windows 3 --window-seconds 0.5   # smoke test

        gpuscout bench resnet50 --mode inference --batch-sizes 1,8,64,256 --latency-target-ms 20

        gpuscout bench resnet18_cifar --mode inference --format keras,saved_model,litert --dataset digits --cpu

        gpuscout bench bert_base --mode inference --batch-sizes 1 --concurrency 8   # latency under load
    """
    out, err = Console(), Console(stderr=True)
    if list_workloads:
        for name in workloads.names():
            w = workloads.get(name)
            seq = f", sequence {w.default_seq_len} (max {w.max_seq_len})" if w.is_sequence else ""
            out.print(f"{name:16} {w.description} (default batch {w.default_batch_size}{seq}; {w.unit}/s)",
                      highlight=False)
        return
    if mode not in ("training", "inference"):
        raise UsageError(f"unknown --mode {mode!r}: choose training or inference")
    if mode == "inference":
        if suite or to_accuracy is not None or repeats != 1 or data != "synthetic" or batch_size is not None:
            raise UsageError("--mode inference takes --batch-sizes; --suite, --to-accuracy, --repeats, --data and "
                             "--batch-size are for training")
        infer = infer_lib.InferOptions(
            batch_sizes=infer_lib.parse_batch_sizes(batch_sizes),
            formats=tuple(f.strip() for f in serve_format.split(",") if f.strip()),
            litert_variants=tuple(v.strip() for v in litert_variants.split(",") if v.strip()),
            requests=requests, warmup_requests=warmup_requests, concurrency=concurrency, load_seconds=load_seconds,
            latency_target_ms=latency_target_ms)
    protocol = bench_lib.BenchOptions()  # the protocol's defaults
    batch_sizes = None
    if suite is not None:
        if workload_names:
            raise UsageError("name workloads or a --suite, not both")
        chosen = suites.get(suite)
        workload_names = list(chosen.workloads)
        batch_sizes = {name: chosen.batch_size(name) for name in workload_names}
        protocol = bench_lib.BenchOptions(warmup_steps=chosen.warmup_steps, windows=chosen.windows,
                                          window_seconds=chosen.window_seconds)
    options = bench_lib.BenchOptions(
        backend=backend, precision=precision, xla=xla, batch_size=parse_batch_size(batch_size),
        seq_len=seq_len, data=data, fit_check=fit_check, model=model, input_shape=input_shape,
        pricing=PricingOptions(price, provider, owned, amortise_years, electricity_usd_per_kwh),
        flops_per_sample=flops_per_sample, to_accuracy=to_accuracy, dataset=dataset, max_epochs=max_epochs,
        warmup_steps=protocol.warmup_steps if warmup_steps is None else warmup_steps,
        windows=protocol.windows if windows is None else windows, window_steps=window_steps,
        window_seconds=protocol.window_seconds if window_seconds is None else window_seconds,
        pipeline_cost=pipeline_cost, repeats=repeats, gpu=gpu,
        cpu=cpu, timeout_s=timeout, telemetry=telemetry, seed=seed)
    if mode == "inference":  # the same options; infer.plan sets the batch per size and leaves training's aside
        _inference(workload_names or [], options, infer, dataset, store_path, as_json, out, err)
        return
    records, stored_at = _plan_and_run(
        lambda nvml: bench_lib.plan(workload_names or [], options, nvml, batch_sizes),
        lambda specs, store, nvml, progress: bench_lib.run_bench(specs, options, store, nvml, progress),
        store_path, as_json, err)
    summaries = bench_lib.summarize_repeats(records)
    if as_json:
        typer.echo(json_document(records, summaries=summaries))
    else:
        console_report.print_bench(out, records, summaries)
        err.print(f"stored {len(records)} run(s) in {stored_at}")
    if any(not r.ok for r in records):
        raise typer.Exit(1)


def _plan_and_run(plan: Callable[[Nvml], tuple[list, str | None]], run: Callable[..., list[RunRecord]],
                  store_path: Path | None, as_json: bool, err: Console) -> tuple[list[RunRecord], Path]:
    """Training's and inference's common frame: plan with NVML open, open (and check) the store
    before anything runs, show progress on stderr; returns the records and where they were stored."""
    with Nvml() as nvml:
        specs, notice = plan(nvml)
        with Store(store_path) as store:
            if notice:
                err.print(f"[yellow]note:[/] {notice}")
            with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                          console=err, transient=as_json) as progress:
                records = run(specs, store, nvml, _RichProgress(progress))
    return records, store.path


def _inference(names: list[str], options: bench_lib.BenchOptions, infer: infer_lib.InferOptions,
               dataset: str | None, store_path: Path | None, as_json: bool, out: Console, err: Console) -> None:
    """bench --mode inference: plan, run (a child per format variant), store, print; a latency
    target no batch meets exits 2 (after storing what was measured) saying the best reached."""
    records, stored_at = _plan_and_run(
        lambda nvml: infer_lib.plan(names, options, infer, nvml, dataset),
        lambda specs, store, nvml, progress: infer_lib.run(specs, options, store, nvml, progress),
        store_path, as_json, err)
    verdicts = infer_lib.target_verdicts(records, infer.latency_target_ms) if infer.latency_target_ms else []
    if as_json:
        typer.echo(json_document(records, latency_targets=verdicts))
    else:
        console_report.print_inference(out, records, verdicts)
        err.print(f"stored {len(records)} run(s) in {stored_at}")
    missed = [v for v in verdicts if v["best"] is None]
    if missed:
        v = missed[0]
        low = v["lowest_p99"]
        raise UsageError(f"no batch size meets p99 <= {v['target_ms']:g} ms for {v['workload']} "
                         f"({v['format']} {v['variant']}): the lowest p99 was {low['latency']['p99_ms']:.2f} ms "
                         f"at batch {low['batch_size']}; raise --latency-target-ms or try a faster format/GPU")
    if any(not r.ok for r in records):
        raise typer.Exit(1)
