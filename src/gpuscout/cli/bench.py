"""`gpuscout bench`: parse, plan, run, store, report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gpuscout import bench as bench_lib
from gpuscout import infer as infer_lib
from gpuscout.cli.emit import emit
from gpuscout.cli.options import (
    AsJson,
    Device,
    Pricing,
    StorePath,
    Tracking,
    grouped,
    measure_options,
    protocol_options,
    renamed,
)
from gpuscout.core import durations
from gpuscout.core.errors import RunError, UsageError, parse_names
from gpuscout.core.spec import PROTOCOL
from gpuscout.measure import engine, plans
from gpuscout.record.run import RunRecord
from gpuscout.report import console as console_report
from gpuscout.report import terminal
from gpuscout.report.progress import run_bars
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.tracking import sending as tracking
from gpuscout.workloads import suites

HELP = """Benchmark training under the fixed protocol: compile apart, warm-up discarded, timed windows.

Exits 0 when every run succeeded, 1 when a run ended oom/failed/timeout (or missed its
--to-accuracy target: not_reached, or its --latency-target-ms), 2 on bad input (nothing run).

Examples:

    gpuscout bench resnet50 --precision mixed_bfloat16 --batch-size 256

    gpuscout bench resnet18_cifar mlp --backend jax --repeats 3 --json

    # every workload, a few minutes on a GPU
    gpuscout bench --suite quick --precision mixed_bfloat16

    gpuscout bench bert_base --seq-len 512 --batch-size 32

    # as large as this GPU allows
    gpuscout bench vit_b16 --batch-size auto --precision mixed_bfloat16

    gpuscout bench resnet18_cifar --to-accuracy 0.94 --dataset cifar10 --precision mixed_bfloat16

    # your own model
    gpuscout bench --model my_model.py:build --precision mixed_bfloat16

    gpuscout bench --model saved.keras --input-shape 128,128,3 --batch-size 64

    # is the input pipeline the limit?
    gpuscout bench resnet50 --data pipeline --pipeline-cost 4

    gpuscout bench mlp --cpu --windows 3 --window-seconds 0.5   # smoke test

    gpuscout bench resnet50 --mode inference --batch-sizes 1,8,64,256 --latency-target-ms 20

    gpuscout bench resnet18_cifar --mode inference --model-format keras,saved_model,litert --dataset digits --cpu

    # latency under load
    gpuscout bench bert_base --mode inference --batch-sizes 1 --concurrency 8
"""


@dataclass
class Target:
    workload_names: Annotated[
        list[str] | None, typer.Argument(metavar="WORKLOAD", help="Workloads to run (see --list).")
    ] = None
    suite: Annotated[
        str | None, typer.Option(help="Run a named suite instead of naming workloads: quick | standard.")
    ] = None
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Your own model: file.py:build (returns the model and a gpuscout.InputSpec) or model.keras."
        ),
    ] = None
    input_shape: Annotated[
        str | None,
        typer.Option(
            "--input-shape", help="Per-sample input shape of a .keras model with free dimensions, e.g. 32,32,3."
        ),
    ] = None
    flops_per_sample: Annotated[
        float | None,
        typer.Option(
            "--flops-per-sample", help="Forward FLOPs per sample of --model (2 per multiply-add) [default: counted]."
        ),
    ] = None
    list_workloads: Annotated[bool, typer.Option("--list", help="List the workloads and exit.")] = False

    def resolved(self) -> tuple[list[str], dict[str, int] | None, object]:
        """(workloads, a suite's batch sizes, the protocol defaults to fill in)."""
        if self.suite is None:
            return list(self.workload_names or []), None, PROTOCOL
        if self.workload_names:
            raise UsageError("name workloads or a --suite, not both")
        chosen = suites.get(self.suite)
        return list(chosen.workloads), {n: chosen.batch_size(n) for n in chosen.workloads}, chosen.protocol


@dataclass
class RunConfig:
    backend: Annotated[str, typer.Option(help="auto | tensorflow | jax (auto: first installed).")] = "auto"
    precision: Annotated[str, typer.Option(help="fp32 | mixed_float16 | mixed_bfloat16.")] = "fp32"
    xla: Annotated[
        bool | None,
        typer.Option("--xla/--no-xla", help="XLA-compile the train step [default: on; jax always compiles]."),
    ] = None
    batch_size: Annotated[
        str | None,
        typer.Option(
            "--batch-size",
            "-b",
            help="Global batch size, or auto: the workload's default scaled to the GPU's "
            "memory [default: the workload's].",
        ),
    ] = None
    seq_len: Annotated[
        int | None, typer.Option("--seq-len", help="Sequence length of token workloads [default: the workload's].")
    ] = None
    data: Annotated[
        str,
        typer.Option(
            help="synthetic (device-resident) | pipeline (tuned host pipeline: parallel map, prefetch) | "
            "naive (the same on one thread)."
        ),
    ] = "synthetic"
    pipeline_cost: Annotated[int, typer.Option(help="pipeline mode: augmentation passes per sample (host cost).")] = 1
    repeats: Annotated[int, typer.Option(help="Independent runs (fresh processes) of each workload.")] = 1
    timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="How long a run may take before it is killed and recorded as timeout (bare: seconds).",
        ),
    ] = durations.spoken(engine.DEFAULT_TIMEOUT_S)
    telemetry: Annotated[
        bool, typer.Option("--telemetry/--no-telemetry", help="Sample GPU telemetry (NVML) during runs.")
    ] = True
    seed: Annotated[int, typer.Option(help="Seed for weights and synthetic data.")] = 0
    fit_check: Annotated[
        bool,
        typer.Option(
            "--fit-check/--no-fit-check", help="Refuse a run whose memory estimate is clearly over the GPU's memory."
        ),
    ] = True


@dataclass
class Accuracy:
    to_accuracy: Annotated[
        float | None,
        typer.Option(
            "--to-accuracy", help="Train on --dataset until this validation accuracy (e.g. 0.94) and record the time."
        ),
    ] = None
    dataset: Annotated[
        str | None,
        typer.Option(
            help="Real data for --to-accuracy (and inference accuracy): cifar10 | mnist (Keras' cache) | "
            "digits (shipped: 1,797 8x8 images) | FILE.npz | DIR."
        ),
    ] = None
    max_epochs: Annotated[
        int, typer.Option(help="--to-accuracy: give up after this many epochs (status not_reached).")
    ] = 30


@dataclass
class Inference:
    mode: Annotated[str, typer.Option(help="training | inference (latency per batch size, deployment formats).")] = (
        "training"
    )
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="inference: the batch sizes of the requests.")] = (
        "1,8,32,128"
    )
    model_format: Annotated[
        str | None,
        typer.Option(
            "--model-format",
            help="inference: keras | saved_model | litert | onnx | tensorrt, or several: keras,litert "
            "[default: keras].",
        ),
    ] = None
    # its old name: --format is an output format in every other verb (docs/options.md); still taken, and says so
    serve_format: Annotated[str | None, typer.Option("--format", hidden=True, help="Now --model-format.")] = None
    litert_variants: Annotated[
        str,
        typer.Option(
            "--litert-variants",
            help="inference --model-format litert: which conversions.",
            show_default="fp32, fp16, int8_dynamic, int8",  # with spaces: it wraps instead of being cut
        ),
    ] = "fp32,fp16,int8_dynamic,int8"
    requests: Annotated[int, typer.Option(help="inference: timed requests per batch size.")] = 200
    warmup_requests: Annotated[int, typer.Option(help="inference: requests discarded first (the first compiles).")] = 20
    concurrency: Annotated[
        int, typer.Option(help="inference: closed-loop clients of a load test at the smallest batch (0: none).")
    ] = 0
    load_seconds: Annotated[float, typer.Option(help="inference: length of the load test.")] = 5.0
    latency_target_ms: Annotated[
        float | None,
        typer.Option(
            "--latency-target-ms", help="inference: the p99 latency to meet; says which batch gives the most within it."
        ),
    ] = None

    def formats(self) -> str:
        return renamed("--format", "--model-format", self.serve_format, self.model_format) or "keras"

    def options(self) -> infer_lib.InferOptions:
        return infer_lib.InferOptions(
            batch_sizes=infer_lib.parse_batch_sizes(self.batch_sizes),
            formats=parse_names(self.formats(), "--model-format", "keras,onnx"),
            litert_variants=parse_names(self.litert_variants, "--litert-variants", "fp32,int8"),
            requests=self.requests,
            warmup_requests=self.warmup_requests,
            concurrency=self.concurrency,
            load_seconds=self.load_seconds,
            latency_target_ms=self.latency_target_ms,
        )


BenchProtocol = protocol_options(PROTOCOL, "the suite's")


@grouped
def bench(
    target: Target,
    run: RunConfig,
    protocol: BenchProtocol,
    device: Device,
    accuracy: Accuracy,
    inference: Inference,
    pricing: Pricing,
    track: Tracking,
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    if target.list_workloads:
        console_report.print_workloads(terminal.console())
        return
    mlflow = track.target(store_path)
    names, suite_batches, protocol_default = target.resolved()
    if (target.input_shape or target.flops_per_sample is not None) and not target.model:
        raise UsageError(
            "--input-shape and --flops-per-sample describe your own --model: add --model FILE, or leave them out"
        )
    if inference.mode not in ("training", "inference"):
        raise UsageError(f"unknown --mode {inference.mode!r}: choose training or inference")
    options = plans.BenchOptions(
        backend=run.backend,
        precision=run.precision,
        xla=run.xla,
        batch_size=_batch_size(run.batch_size),
        seq_len=run.seq_len,
        data=run.data,
        pipeline_cost=run.pipeline_cost,
        repeats=run.repeats,
        seed=run.seed,
        fit_check=run.fit_check,
        protocol=protocol.settings(protocol_default),
        device=device.choice(),
        measure=measure_options(run.timeout, run.telemetry, pricing),
        model=target.model,
        input_shape=target.input_shape,
        flops_per_sample=target.flops_per_sample,
        to_accuracy=accuracy.to_accuracy,
        dataset=accuracy.dataset,
        max_epochs=accuracy.max_epochs,
    )
    if inference.mode == "training" and (inference.model_format or inference.serve_format):
        raise UsageError("--model-format is the form an inference benchmark serves the model in: give --mode inference")
    if inference.mode == "inference":
        if (
            target.suite
            or accuracy.to_accuracy is not None
            or run.repeats != 1
            or run.data != "synthetic"
            or run.batch_size is not None
        ):
            raise UsageError(
                "--mode inference takes --batch-sizes; --suite, --to-accuracy, --repeats, --data and "
                "--batch-size are for training"
            )
        _inference(names, options, inference.options(), accuracy.dataset, store_path, as_json, mlflow)
        return
    records = _plan_and_run(
        lambda nvml: plans.plan(names, options, nvml, suite_batches),
        bench_lib.run_bench,
        options,
        store_path,
        as_json,
        mlflow,
    )
    emit(bench_lib.BenchResult(records, bench_lib.summarize_repeats(records)), as_json)
    if any(not r.ok for r in records):
        raise typer.Exit(1)


def _batch_size(text: str | None) -> int | str | None:
    if text is None or text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--batch-size must be a whole number or auto, got {text!r}") from None


def _plan_and_run(
    plan: Callable[[Nvml], tuple[list, str | None]],
    run: Callable[..., list[RunRecord]],
    options: plans.BenchOptions,
    store_path: Path | None,
    as_json: bool,
    mlflow: tuple[str, str] | None = None,
) -> list[RunRecord]:
    """Training's and inference's common frame: plan with NVML open, open (and check) the store
    before anything runs, show progress on stderr, say where the runs are stored (and send them
    to MLflow with --mlflow)."""
    with Nvml() as nvml:
        specs, notice = plan(nvml)
        with Store(store_path) as store, run_bars(quiet=as_json) as bars:
            if notice:
                bars.note(notice)
            records = run(specs, options, store, nvml, bars)
    if not as_json:
        terminal.console(stderr=True, highlight=False).print(
            f"stored {len(records)} run(s) in {store.path}", markup=False
        )
    tracking.send_group(mlflow, "bench", records, store.path)
    return records


def _inference(
    names: list[str],
    options: plans.BenchOptions,
    infer: infer_lib.InferOptions,
    dataset: str | None,
    store_path: Path | None,
    as_json: bool,
    mlflow: tuple[str, str] | None,
) -> None:
    """bench --mode inference: plan, run (a child per format variant), store, print; a latency
    target no batch meets ends with exit 1 (after storing what was measured), saying the best reached."""
    records = _plan_and_run(
        lambda nvml: infer_lib.plan(names, options, infer, nvml, dataset),
        infer_lib.run,
        options,
        store_path,
        as_json,
        mlflow,
    )
    verdicts = infer_lib.target_verdicts(records, infer.latency_target_ms) if infer.latency_target_ms else []
    emit(infer_lib.InferenceResult(records, verdicts), as_json)
    missed = [v for v in verdicts if v["best"] is None]
    if missed:
        v, low = missed[0], missed[0]["lowest_p99"]
        raise RunError(
            f"no batch size meets p99 <= {v['target_ms']:g} ms for {v['workload']} "
            f"({v['format']} {v['variant']}): the lowest p99 was {low['latency']['p99_ms']:.2f} ms "
            f"at batch {low['batch_size']}; raise --latency-target-ms or try a faster format/GPU"
        )
    if any(not r.ok for r in records):
        raise typer.Exit(1)
