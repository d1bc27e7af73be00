"""`gpuscout tune`: ablation, largest batch, input-bound verdict and ranked recommendations."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuscout import tune as tune_lib
from gpuscout.cli import session_report
from gpuscout.cli.emit import emit
from gpuscout.cli.options import (
    AsJson,
    Device,
    StorePath,
    Tracking,
    grouped,
    measure_options,
    protocol_options,
    renamed,
)
from gpuscout.cli.session_report import save_and_show
from gpuscout.core import durations, outputs
from gpuscout.core.errors import UsageError, parse_names
from gpuscout.measure import engine
from gpuscout.measure.command import Command, ScriptIdentity
from gpuscout.report import terminal
from gpuscout.report.progress import run_bars
from gpuscout.report.tune import print_tune
from gpuscout.report.tune_script import print_tune_script
from gpuscout.report.watch_live import view_for
from gpuscout.store import Store, default_store_path
from gpuscout.telemetry.nvml import Nvml
from gpuscout.tracking import sending as tracking
from gpuscout.tune.changes import CHANGES
from gpuscout.tune.runs import SCRIPT_BUDGET_S
from gpuscout.tune.workload_tune import WORKLOAD_BUDGET_S

if TYPE_CHECKING:  # imported where they run: planning a session loads none of their frameworks
    from gpuscout.measure.command import Command
    from gpuscout.record.watch import WatchRecord
    from gpuscout.tune.runs import ScriptOptions

HELP = """Measure what each fix buys on your own script, unchanged: `gpuscout tune -- python train.py`
runs it as the baseline under watch's instrumentation, then once per change the baseline makes
worth trying (XLA, mixed precision, steps_per_execution, the PyDataset's workers, a cache,
prefetching, device batches, a larger batch), each injected at start-up (no file edited) and
stopped after the same number of training steps: whole epochs, validation and callbacks in,
where the script's epochs are short enough, so each is judged by your own clock; then the
changes that won together, and the baseline again. A change that trains otherwise (more steps an
epoch, batches no longer shuffled, other data) is shown as such and never kept. The table ranks
what each bought, with its 95% CI, and the line to write; --patch writes them as a diff it has
run on a copy. Your script's side effects (files it writes, a checkpoint) happen once per run.
--dry-run plans from a stored watch of the command.

For a registered workload or --model: what each optimisation buys on this GPU, the largest batch
that fits, whether training is input-bound, ranked, with the code to paste.

Every run is stored (tagged with the session); the report is saved as JSON beside the store.

Examples:

    gpuscout tune -- python train.py --epochs 100

    gpuscout tune --only jit_compile,mixed_precision --budget-minutes 10 -- python train.py

    gpuscout tune --dry-run -- python train.py

    # a notebook: each change tried on its cells, run in a real kernel (docs/notebooks.md)
    gpuscout tune train.ipynb

    gpuscout tune resnet50 --backend jax --budget-minutes 20

    # the session and each of its runs in MLflow
    gpuscout tune --mlflow http://mlflow:5000 -- python train.py

    gpuscout tune mlp --backend tensorflow --cpu --parts ablation,input

    # will my tf.data pipeline keep up?
    gpuscout tune resnet50 --pipeline my_input.py:make_dataset

    gpuscout tune --model my_model.py:build --parts batch --max-batch 4096
"""


@dataclass
class TuneConfig:
    target: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="WORKLOAD | -- COMMAND [ARGS]...",
            help="A registered workload (or --model), or your training command after `--`.",
        ),
    ] = None
    model: Annotated[str | None, typer.Option("--model", help="Your model: file.py:build or model.keras.")] = None
    backend: Annotated[str, typer.Option(help="auto | tensorflow | jax.")] = "auto"
    parts: Annotated[str, typer.Option(help="Which parts to run: ablation, batch, input.")] = ",".join(tune_lib.PARTS)
    budget_minutes: Annotated[
        str | None,
        typer.Option(
            "--budget-minutes",
            metavar="DURATION",
            help=f"The session's time (20m, 1.5h; a bare number is minutes); the search stops before overrunning "
            f"it [default: {durations.spoken(WORKLOAD_BUDGET_S)} for a workload, {durations.spoken(SCRIPT_BUDGET_S)} "
            "for a command].",
        ),
    ] = None
    # its old name: --budget was minutes here and dollars in recommend (issue 62, one vocabulary)
    budget: Annotated[str | None, typer.Option("--budget", hidden=True, help="Now --budget-minutes.")] = None
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", "-b", help="The batch of the ablation [default: the workload's].")
    ] = None
    max_batch: Annotated[
        int | None, typer.Option(help="Stop the batch search here [default: 64x the default on a GPU, 8x on a CPU].")
    ] = None
    pipeline: Annotated[
        str | None, typer.Option(help="Your tf.data pipeline: file.py:make_dataset (returns a batched Dataset).")
    ] = None
    pipeline_cost: Annotated[int, typer.Option(help="Augmentation passes per sample of the built-in pipeline.")] = 1
    timeout: Annotated[
        str, typer.Option(metavar="DURATION", help="How long one run may take before it is killed (bare: seconds).")
    ] = durations.spoken(engine.DEFAULT_TIMEOUT_S)
    steps: Annotated[
        int | None,
        typer.Option(
            help="-- COMMAND: training steps per run, rounded up to whole epochs where the script's are short "
            "(a cache's runs: its fill and three after it) [default: what 10 s of the baseline's training ran, "
            "four whole epochs at least]."
        ),
    ] = None
    only: Annotated[
        str | None, typer.Option(help=f"-- COMMAND: only these changes (comma list of {', '.join(CHANGES)}).")
    ] = None
    skip: Annotated[str | None, typer.Option(help="-- COMMAND: not these changes (comma list, as --only).")] = None
    dry_run: Annotated[bool, typer.Option("--dry-run", help="-- COMMAND: print the plan, run nothing.")] = False
    patch: Annotated[
        Path | None,
        typer.Option(
            "--patch",
            help="-- COMMAND: write the winning changes to FILE as a unified diff of your files (never "
            "applied to them), after running a patched copy to check it.",
            metavar="FILE",
        ),
    ] = None
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="-- COMMAND: replace --patch FILE even when gpuscout did not write it (never the store)."
        ),
    ] = False

    def budget_s(self, default_s: float) -> float:
        """The session's budget in seconds: --budget-minutes (or its old name, said), else `default_s`."""
        given = renamed("--budget", "--budget-minutes", self.budget, self.budget_minutes)
        return default_s if given is None else durations.seconds(given, "--budget-minutes", bare="m")


TuneProtocol = protocol_options(tune_lib.TUNE_PROTOCOL)


@grouped
def tune(
    config: TuneConfig,
    protocol: TuneProtocol,
    device: Device,
    track: Tracking,
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    target = track.target(store_path)
    if _command_given() or (config.target and config.target[0].endswith(".ipynb")):
        return tune_command(config, store_path, as_json, target)  # a notebook file is a command of its own
    if config.target and len(config.target) > 1:
        raise UsageError(
            f"one workload, got {' '.join(config.target)!r}: to tune your script, put it after `--` "
            "(gpuscout tune -- python train.py)"
        )
    workload = config.target[0] if config.target else None
    if config.steps is not None or config.only or config.skip or config.dry_run or config.patch or config.force:
        raise UsageError(
            "--steps, --only, --skip, --dry-run, --patch and --force are for a command: gpuscout tune -- python "
            "train.py"
        )
    if workload and config.model:
        raise UsageError("name a workload or a --model, not both")
    options = tune_lib.TuneOptions(
        backend=config.backend,
        parts=parse_names(config.parts, "--parts", "ablation,batch"),
        budget_s=config.budget_s(WORKLOAD_BUDGET_S),
        protocol=protocol.settings(),
        device=device.choice(),
        measure=measure_options(config.timeout, telemetry=True),
        batch_size=config.batch_size,
        max_batch=config.max_batch,
        pipeline=config.pipeline,
        pipeline_cost=config.pipeline_cost,
        model=config.model,
    )
    with Nvml() as nvml:
        planned = tune_lib.plan(workload, options, nvml)  # bad input: one line, before any display
        session_report.folder("tune", store_path or default_store_path(), make=False)
        with Store(store_path) as store, run_bars(quiet=as_json) as bars:
            report = tune_lib.tune(workload, options, nvml, store, bars, planned)
    save_and_show(report, "tune", store.path, as_json)
    params = {"workload": report.workload, "backend": report.backend, "budget_minutes": f"{report.budget_s / 60:g}"}
    tracking.send_session(target, "tune", report, print_tune, store.path, params=params)


def _command_given() -> bool:
    """`gpuscout tune ... -- COMMAND`: a `--` after the verb (click hands what follows it to the
    positional argument, as it does a workload's name: only the `--` tells them apart)."""
    argv = sys.argv[1:]
    return "tune" in argv and "--" in argv[argv.index("tune") + 1 :]


@dataclasses.dataclass(frozen=True)
class ScriptRequest:
    """A tune session of a command, checked before the command first runs."""

    resolved: Command  # the command as it will run
    options: ScriptOptions
    patch: outputs.Output | None  # --patch FILE, checked writable
    baseline: WatchRecord | None  # the latest stored watch of this command: a dry run plans from it


def script_request(config: TuneConfig, store_path: Path | None) -> ScriptRequest:
    """The options of `tune -- COMMAND` as its request; bad input is one line (exit 2) before
    the command starts."""
    from gpuscout.measure import command as commands
    from gpuscout.measure import rules
    from gpuscout.tune import runs, script

    rules.at_least("--steps", config.steps, 1)
    minutes = config.budget_s(SCRIPT_BUDGET_S) / 60
    if minutes < 1:
        raise UsageError(f"--budget-minutes {minutes:g} is too small for the baseline and one change: give 1 or more")
    if (
        config.model
        or config.pipeline
        or config.batch_size
        or config.max_batch
        or config.parts != ",".join(tune_lib.PARTS)
    ):
        raise UsageError("--model, --pipeline, --batch-size, --max-batch and --parts tune a workload, not a command")
    only = parse_names(config.only, "--only", "mixed_precision,cache") if config.only is not None else ()
    skip = parse_names(config.skip, "--skip", "workers,batch_size") if config.skip is not None else ()
    script.check_names(only, "--only")
    script.check_names(skip, "--skip")
    both = sorted(set(only) & set(skip))
    if both:
        raise UsageError(f"--only and --skip both name {', '.join(both)}: tune a change or skip it, not both")
    if not [k for k in CHANGES if (not only or k in only) and k not in skip]:  # before a baseline runs for nothing
        raise UsageError(f"--skip leaves no change to try (it names all {len(CHANGES)}): skip fewer, or --only some")
    named = commands.script_of(list(config.target or []))  # checked before the command is: its words are
    script = Path(named).resolve() if named else None
    patch = writable(config.patch, store_path or default_store_path(), config.force, script) if config.patch else None
    resolved = commands.resolve(config.target or [], verb="tune")
    options = runs.ScriptOptions(
        steps=config.steps,
        budget_s=minutes * 60,
        only=only,
        skip=skip,
        patch=patch.given if patch else None,
        timeout_s=durations.seconds(config.timeout, "--timeout"),
    )
    baseline = _stored_baseline(resolved, store_path)
    least = runs.least_budget_s(baseline.duration_s) if baseline is not None else None
    if least is not None and options.budget_s < least and not config.dry_run:  # before the script starts
        raise UsageError(
            f"--budget-minutes {minutes:g} cannot hold the baseline and one change measured against it: a "
            f"run of this command took {baseline.duration_s:.0f} s (stored run {baseline.id}); give --budget-minutes "
            f"{math.ceil(least / 60)} or more"
        )
    return ScriptRequest(resolved, options, patch, baseline)


def tune_command(config: TuneConfig, store_path, as_json: bool, target: tuple[str, str] | None = None) -> None:
    """`gpuscout tune -- COMMAND`: its request, then the plan (--dry-run) or the session, stored,
    emitted, sent to MLflow, and its patch written."""
    from gpuscout.tune import runs, script

    request = script_request(config, store_path)
    resolved, options, patch, baseline = request.resolved, request.options, request.patch, request.baseline
    if config.dry_run:  # reads the store if there is one; writes nothing, runs nothing
        emit(script.dry_run(" ".join(resolved.given), baseline, options.only, options.skip), as_json)
        return
    err = terminal.console(stderr=True, highlight=False)
    session_report.folder("tune", store_path or default_store_path(), make=False)
    with Nvml() as nvml, Store(store_path) as store:
        err.print(
            f"tune: {resolved.workload} runs once per change (and twice as the baseline): its side effects "
            "(files it writes) happen each time",
            markup=False,
        )
        progress = runs.Progress(
            started=lambda name, n, total: err.print(
                f"tune: run {n}{f'/{total}' if total else ''}: {name}…", markup=False
            ),
            ended=lambda name, r: err.print(
                f"tune: {name}: {r.status}" + (f", {r.samples_per_s:,.0f} samples/s" if r.samples_per_s else ""),
                markup=False,
            ),
        )
        session = runs.Session(
            resolved, options, engine.Session(nvml), store, lambda: view_for(True, as_json), progress
        )
        report = runs.tune_script(session)
    save_and_show(report, "tune", store.path, as_json)
    best = report.best
    tracking.send_session(
        target,
        "tune",
        report,
        print_tune_script,
        store.path,
        report.run_ids,
        metrics={
            "baseline_samples_per_s": report.baseline.samples_per_s,
            "best_samples_per_s": best.samples_per_s if best else None,
            "speedup": best.ratio if best else None,
            "speedup_ci95_low": best.ratio_low if best else None,
            "speedup_ci95_high": best.ratio_high if best else None,
            "wall_s": report.wall_s,
        },
        params={
            "command": " ".join(report.command),
            "steps": str(report.steps),
            "kept": ",".join(report.path),
            "chosen": ",".join(report.chosen),
            "confirmation": (best.confirmation or "") if best else "",
        },
        diff=report.diff,
    )
    if report.diff:
        outputs.write(
            patch,
            f"{outputs.PATCH_MARK}: apply it in the script's folder with `git apply "
            f"{patch.given.name}` or `patch -p1 < {patch.given.name}`\n{report.diff}",
        )


def _stored_baseline(command: Command, store_path: Path | None):
    """The latest stored watch of this script, unchanged (a tune session's runs of a change have
    the same command), that timed its steps: what a dry run plans from and what prices the budget.
    A run is this script's by its file, never by the command's words: the same words in a folder
    where they reach another file, or the same file since edited, are another script
    (measure/command.ScriptIdentity). None where there is none."""
    if not (store_path or default_store_path()).exists():
        return None
    script = ScriptIdentity.of(command, os.getcwd())  # the file digested once, not once a stored run
    with Store(store_path, readonly=True) as store:
        stored = [
            r
            for r in store.list(kind="watch")
            if r.windows and r.tune_change is None and script.ran(r.command, r.cwd, r.script_sha256)
        ]
    return max(stored, key=lambda r: r.created_utc, default=None)


def writable(path: Path, store: Path, force: bool, script: Path | None = None) -> outputs.Output:
    """--patch FILE can be written, checked before anything runs as every output is (core/outputs:
    never the store, never a file gpuscout did not write without --force); a Python file never, nor
    the script tuned (`script`, resolved), judged by the file the path reaches: a link to the script
    had the diff written over it with --force (issue 87, item 1)."""
    path = path.expanduser()
    if os.path.isdir(path):
        raise UsageError(f"--patch {path}: a folder, not a file to write the diff to")
    real = Path(os.path.realpath(path))  # the file a write reaches, whatever link leads there
    if real.suffix == ".py" or (script is not None and real == script):
        reached = f" ({real}, through a link)" if real != path.absolute() else ""
        raise UsageError(
            f"--patch {path}: {'the script tune runs' if real == script else 'a Python file'}{reached}; the diff "
            "goes to a file of its own (train.patch), never over a script"
        )
    target = outputs.check_output(path, store, force, "--patch")
    if target.stream is not None and outputs.always_full(path):  # the session would run, then the diff be lost
        os.close(target.stream)
        raise UsageError(f"--patch {path}: every write there fails (/dev/full); give a file to write the diff to")
    folder = (target.file or path).parent
    if target.file is not None and not folder.is_dir():
        raise UsageError(f"--patch {path}: no folder {folder}")
    if target.file is not None and (not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK))):
        raise UsageError(f"--patch {path}: not writable here (permissions); give a path you can write")
    return target
