"""`gpuscout tune`: ablation, largest batch, input-bound verdict and ranked recommendations."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuscout import engine
from gpuscout import tune as tune_lib
from gpuscout.record.run import RunRecord
from gpuscout.cli.session_report import save_and_show
from gpuscout.report import format as fmt
from gpuscout.spec import RunSpec
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml


class _RichProgress(engine.Progress):
    def __init__(self, progress: Progress, console: Console) -> None:
        self.progress, self.console, self.task, self.count = progress, console, None, 0

    def run_started(self, spec: RunSpec, label: str, number: int, total: int) -> None:
        self.count += 1
        self.label = f"[{self.count}] {label} (bs{spec.batch_size})"
        self.task = self.progress.add_task(f"{self.label}: starting", total=spec.windows)

    def event(self, spec: RunSpec, event: dict) -> None:
        if event.get("event") == "compiled":
            self.progress.update(self.task, description=f"{self.label}: compiled in {event['compile_s']:.1f} s")
        elif event.get("event") == "window":
            self.progress.update(self.task, advance=1, description=f"{self.label}: {event['throughput']:,.1f}/s")

    def run_finished(self, label: str, records: list[RunRecord]) -> None:
        status = records[0].status if records else "done"
        self.progress.update(self.task, description=f"{self.label}: {status}", completed=self.progress.tasks[-1].total)

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]note:[/] {text}")


def _ratio(gain: dict | None) -> str:
    if not gain:
        return fmt.DASH
    ci = f" [{gain['ci95_low']:.2f}–{gain['ci95_high']:.2f}]" if gain.get("ci95_low") is not None else ""
    return f"{gain['ratio']:.2f}x{ci}"


def _print(report: dict, out: Console) -> None:
    out.print(f"[bold]gpuscout tune[/] {report['workload']} on {report['gpu'] or 'the CPU'} ({report['backend']}), "
              f"session {report['session']}, {report['elapsed_s'] / 60:.1f} min", highlight=False)
    for note in report["notes"]:
        out.print(f"note: {note}", highlight=False)
    ab = report.get("ablation")
    if ab:
        t = Table(title="what each optimisation buys (speedup, 95% CI)", title_justify="left")
        for c in ("setting", "samples/s", "speedup", "over", "loss after N steps", "input wait", "run"):
            t.add_column(c)
        for row in ab["rows"]:
            loss = row["loss"]
            loss_text = fmt.DASH if not loss else (f"{loss['value']:.4g} vs {loss['baseline']:.4g} @{loss['steps']}"
                                                    + (" [red]changed[/]" if loss["changed"] else ""))
            t.add_row(row["label"], fmt.number(row["samples_per_s"]), _ratio(row["speedup"]), row["versus"], loss_text,
                      fmt.percent(row["input_wait_share"]), row["run_id"] or row["status"])
        out.print(t)
        if ab.get("note"):
            out.print(f"note: {ab['note']}", highlight=False)
    batch = report.get("batch")
    if batch:
        limit = {"memory": f"first out of memory at {batch.get('first_oom')}", "cap": f"no OOM up to --max-batch {batch.get('cap')}",
                 "budget": "stopped by the --budget"}[batch["limited_by"]]
        out.print(f"[bold]largest batch[/]: {batch['largest']} ({limit}; {len(batch['probes'])} probes); "
                  f"knee: {batch['knee']}", highlight=False)
        t = Table(title="throughput against batch size", title_justify="left")
        for c in ("batch", "samples/s", "peak memory", "run"):
            t.add_column(c)
        for c in batch["curve"]:
            t.add_row(str(c["batch_size"]) + (" (knee)" if c["batch_size"] == batch["knee"] else ""),
                      fmt.number(c["samples_per_s"]), fmt.bytes_(c["peak_memory_bytes"]), c["run_id"])
        out.print(t)
    inp = report.get("input")
    if inp:
        if "pipeline" in inp:
            p = inp["pipeline"] or {}
            out.print(f"[bold]your pipeline[/]: {fmt.number(p.get('samples_per_s'))} samples/s alone; the model takes "
                      f"{fmt.number(inp['model_samples_per_s'])}/s: "
                      + ("[red]it would starve this GPU[/]" if inp.get("starves") else "it keeps up")
                      + f" ({inp.get('verdict') or fmt.DASH}, predicted wait {fmt.percent(inp.get('predicted_wait_share'))})",
                      highlight=False)
        else:
            one, tuned = inp.get("pipeline_one_thread") or {}, inp.get("pipeline_tuned") or {}
            out.print(f"[bold]input[/]: pipeline alone {fmt.number(one.get('samples_per_s'))} samples/s on one thread, "
                      f"{fmt.number(tuned.get('samples_per_s'))} tuned; model alone {fmt.number(inp['model_samples_per_s'])}; "
                      f"together {fmt.number(inp['together_samples_per_s'])} with {fmt.percent(inp['input_wait_share'])} "
                      f"of the time waiting for input: [bold]{inp['verdict'] or fmt.DASH}[/]; the model needs about "
                      f"{inp['cores_needed'] or fmt.DASH} host core(s) of this pipeline", highlight=False)
    if report["recommendations"]:
        out.print("[bold]recommendations[/] (largest measured gain first):")
        for i, rec in enumerate(report["recommendations"], 1):
            out.print(f"{i}. {rec['title']}: {_ratio(rec['gain'])} — {rec['cost']}", highlight=False)
            out.print(f"   {rec['code']}".replace("\n", "\n   "), highlight=False, markup=False)
    if report["skipped"]:
        out.print(f"[yellow]skipped (budget)[/]: {', '.join(report['skipped'])}", highlight=False)


def tune(
    workload: Optional[str] = typer.Argument(None, help="A registered workload (or --model)."),
    model: Optional[str] = typer.Option(None, "--model", help="Your model: file.py:build or model.keras."),
    backend: str = typer.Option("auto", help="auto | tensorflow | jax."),
    parts: str = typer.Option("ablation,batch,input", help="Which parts to run: ablation, batch, input."),
    budget: float = typer.Option(30.0, help="Total time budget in minutes; the search stops before overrunning it."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="The batch of the ablation [default: the workload's]."),
    max_batch: Optional[int] = typer.Option(None, help="Stop the batch search here [default: 64x the default on a GPU, 8x on a CPU]."),
    pipeline: Optional[str] = typer.Option(None, help="Your tf.data pipeline: file.py:make_dataset (returns a batched Dataset)."),
    pipeline_cost: int = typer.Option(1, help="Augmentation passes per sample of the built-in pipeline (host cost)."),
    windows: int = typer.Option(3, help="Timing windows per run."),
    window_seconds: float = typer.Option(1.0, help="Minimum seconds per window."),
    warmup_steps: int = typer.Option(5, help="Warm-up steps per run."),
    gpu: Optional[int] = typer.Option(None, help="GPU index [default: 0 when there is a GPU]."),
    cpu: bool = typer.Option(False, "--cpu", help="Run on the CPU."),
    timeout: float = typer.Option(1800.0, help="Seconds before one run is killed."),
    store_path: Optional[Path] = typer.Option(None, "--store", envvar="GPUSCOUT_STORE", help="Results store (SQLite)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole report as JSON."),
) -> None:
    """Measure what each optimisation buys on this GPU, find the largest batch that fits, and tell
    whether training is input-bound; then rank what to change, with the code to paste.

    Every run is stored (tagged with the session); the report is saved as JSON beside the store.

    Examples:

        gpuscout tune resnet50 --backend jax --budget 20

        gpuscout tune mlp --backend tensorflow --cpu --parts ablation,input

        gpuscout tune resnet50 --pipeline my_input.py:make_dataset   # will my tf.data pipeline keep up?

        gpuscout tune --model my_model.py:build --parts batch --max-batch 4096
    """
    options = tune_lib.TuneOptions(
        backend=backend, gpu=gpu, cpu=cpu, parts=tuple(p.strip() for p in parts.split(",") if p.strip()),
        budget_s=budget * 60, warmup_steps=warmup_steps, windows=windows, window_seconds=window_seconds,
        batch_size=batch_size, max_batch=max_batch, pipeline=pipeline, pipeline_cost=pipeline_cost, model=model,
        timeout_s=timeout)
    if workload and model:
        from gpuscout.errors import UsageError

        raise UsageError("name a workload or a --model, not both")
    err = Console(stderr=True)
    with Nvml() as nvml, Store(store_path) as store:
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                      transient=as_json) as progress:
            report = tune_lib.tune(workload, options, nvml, store, _RichProgress(progress, err))
    save_and_show(report, "tune", store.path, as_json, _print)
