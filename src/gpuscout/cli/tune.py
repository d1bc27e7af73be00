"""`gpuscout tune`: ablation, largest batch, input-bound verdict and ranked recommendations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

import typer

from gpuscout.core import engine
from gpuscout import tune as tune_lib
from gpuscout.cli.options import AsJson, Device, StorePath, grouped, measure_options, protocol_options
from gpuscout.cli.session_report import save_and_show
from gpuscout.core.errors import UsageError
from gpuscout.report.progress import run_bars
from gpuscout.report.tune import print_tune
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml

HELP = """Measure what each optimisation buys on this GPU, find the largest batch that fits, and tell
whether training is input-bound; then rank what to change, with the code to paste.

Every run is stored (tagged with the session); the report is saved as JSON beside the store.

Examples:

    gpuscout tune resnet50 --backend jax --budget 20

    gpuscout tune mlp --backend tensorflow --cpu --parts ablation,input

    gpuscout tune resnet50 --pipeline my_input.py:make_dataset   # will my tf.data pipeline keep up?

    gpuscout tune --model my_model.py:build --parts batch --max-batch 4096
"""


@dataclass
class TuneConfig:
    workload: Annotated[Optional[str], typer.Argument(help="A registered workload (or --model).")] = None
    model: Annotated[Optional[str], typer.Option("--model", help="Your model: file.py:build or model.keras.")] = None
    backend: Annotated[str, typer.Option(help="auto | tensorflow | jax.")] = "auto"
    parts: Annotated[str, typer.Option(help="Which parts to run: ablation, batch, input.")] = "ablation,batch,input"
    budget: Annotated[float, typer.Option(
        help="Total time budget in minutes; the search stops before overrunning it.")] = 30.0
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", "-b", help="The batch of the ablation [default: the workload's].")] = None
    max_batch: Annotated[Optional[int], typer.Option(
        help="Stop the batch search here [default: 64x the default on a GPU, 8x on a CPU].")] = None
    pipeline: Annotated[Optional[str], typer.Option(
        help="Your tf.data pipeline: file.py:make_dataset (returns a batched Dataset).")] = None
    pipeline_cost: Annotated[int, typer.Option(help="Augmentation passes per sample of the built-in pipeline.")] = 1
    timeout: Annotated[float, typer.Option(help="Seconds before one run is killed.")] = engine.DEFAULT_TIMEOUT_S


TuneProtocol = protocol_options(tune_lib.TUNE_PROTOCOL)


@grouped
def tune(config: TuneConfig, protocol: TuneProtocol, device: Device, store_path: StorePath = None,
         as_json: AsJson = False) -> None:
    if config.workload and config.model:
        raise UsageError("name a workload or a --model, not both")
    options = tune_lib.TuneOptions(
        backend=config.backend, parts=tuple(p.strip() for p in config.parts.split(",") if p.strip()),
        budget_s=config.budget * 60, protocol=protocol.settings(), device=device.choice(),
        measure=measure_options(config.timeout, telemetry=True), batch_size=config.batch_size,
        max_batch=config.max_batch, pipeline=config.pipeline, pipeline_cost=config.pipeline_cost, model=config.model)
    with Nvml() as nvml:
        planned = tune_lib.plan(config.workload, options, nvml)  # bad input: one line, before any display
        with Store(store_path) as store, run_bars(quiet=as_json) as bars:
            report = tune_lib.tune(config.workload, options, nvml, store, bars, planned)
    save_and_show(report, "tune", store.path, as_json, print_tune)
