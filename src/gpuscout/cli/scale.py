"""`gpuscout scale`: speedup and efficiency over this host's GPUs, a verdict, and multi-host runs.

One command, four modes, each its own function: measure here (the default), print the commands
of a multi-host run (--hosts), run this host's part of one (--worker), merge the workers' records
(--merge)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gpuscout import scale as scale_lib
from gpuscout.cli import session_report
from gpuscout.cli.emit import emit
from gpuscout.cli.options import (
    AsJson,
    Gpus,
    StorePath,
    given_args,
    gpu_indices,
    grouped,
    measure_options,
    protocol_options,
    renamed,
)
from gpuscout.cli.session_report import save_and_show
from gpuscout.core import durations
from gpuscout.core.errors import UsageError, parse_positive_ints
from gpuscout.core.spec import PROTOCOL, BatchNormStats
from gpuscout.report.progress import run_bars
from gpuscout.scale import cluster
from gpuscout.scale.results import Merged, WorkerDone
from gpuscout.store import Store, default_store_path
from gpuscout.telemetry.nvml import Nvml

HELP = """Measure how training speeds up over this host's GPUs: throughput with its CI, speedup and
efficiency against one GPU, time per step outside compute, per-GPU telemetry, the NVLink/PCIe
topology, and a verdict with the likely cause and what to try.

Every run is stored (tagged with the session); the report is saved as JSON beside the store;
`gpuscout report` plots it.

Examples:

    gpuscout scale resnet50 --gpu-counts 1,2,4 --backend jax

    # counts 1 and 2 on GPUs 2 and 3
    gpuscout scale resnet50 --gpu-counts 1,2 --gpus 2,3 --backend jax

    # Keras DataParallel's synced BN
    gpuscout scale resnet50 --gpu-counts 1,2 --backend jax --batchnorm global

    gpuscout scale bert_base --gpu-counts 1,2 --mode strong --batch-size 256

    # the code path, on the CPU
    gpuscout scale mlp --cpu --gpu-counts 1,2 --backend tensorflow

    # MultiWorkerMirrored, 2 processes
    gpuscout scale mlp --cpu --gpu-counts 1,2 --backend tensorflow --local-workers

    # prints per-host commands
    gpuscout scale resnet50 --backend tensorflow --hosts gpu-a:2222,gpu-b:2222 --gpu-counts 8
"""


def parse_counts(text: str) -> tuple[int, ...]:
    return parse_positive_ints(text, "--gpu-counts", "GPU counts", "1,2,4")


def counts_and_ids(counts: str | None, gpus: str | None, gpu_ids: str | None) -> tuple[str, str | None]:
    """--gpu-counts and the GPUs by index (--gpus, once --gpu-ids) as text, in the vocabulary every
    verb shares (issue 62: --gpus names GPUs by index, as in sweep). scale's --gpus was its counts
    until 2026-11: `--gpus` alone is refused rather than read anew, since an old `--gpus 1,2,4`
    read as indices would measure other GPUs without a word."""
    if gpus is not None and counts is None:
        raise UsageError(
            "scale --gpus now names GPUs by index, as in sweep; GPU counts are --gpu-counts: give "
            + (
                f"--gpu-counts {gpus} --gpus {gpu_ids}"
                if gpu_ids is not None
                else f"--gpu-counts {gpus} for the counts, or --gpu-counts with --gpus {gpus} for these GPUs"
            )
        )
    return counts or "1,2", renamed("--gpu-ids", "--gpus", gpu_ids, gpus)


def parse_batchnorm(text: str) -> BatchNormStats:
    try:
        return BatchNormStats(text.replace("-", "_"))
    except ValueError:
        raise UsageError(
            f"--batchnorm {text!r}: use per-replica (statistics per GPU, as DDP and MirroredStrategy) "
            "or global (over the whole batch, as Keras' DataParallel)"
        ) from None


@dataclass
class ScaleConfig:
    workload: Annotated[str | None, typer.Argument(help="A registered workload.")] = None
    gpu_counts: Annotated[
        str | None,
        typer.Option(
            "--gpu-counts",
            help="GPU counts to measure, e.g. 1,2,4 (1 is always measured; N: the first N of --gpus) [default: 1,2].",
        ),
    ] = None
    gpus: Gpus = None
    mode: Annotated[
        str, typer.Option(help="weak: per-GPU batch fixed, global batch grows; strong: global batch fixed, split.")
    ] = "weak"
    backend: Annotated[
        str, typer.Option(help="auto | tensorflow (MirroredStrategy, NCCL) | jax (data parallel under jax.shard_map).")
    ] = "auto"
    precision: Annotated[str, typer.Option(help="fp32 | mixed_float16 | mixed_bfloat16.")] = "fp32"
    xla: Annotated[
        bool | None,
        typer.Option(
            "--xla/--no-xla", help="[default: on for jax; tensorflow strategies run without it, as Keras does]."
        ),
    ] = None
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", "-b", help="Weak: per-GPU batch; strong: global batch [default: the workload's]."),
    ] = None
    seq_len: Annotated[int | None, typer.Option(help="Sequence length of token workloads.")] = None
    data: Annotated[str, typer.Option(help="synthetic | pipeline | naive (a host input pipeline per worker).")] = (
        "synthetic"
    )
    gpu_ids: Annotated[str | None, typer.Option("--gpu-ids", hidden=True, help="Now --gpus.")] = None
    cpu: Annotated[
        bool, typer.Option("--cpu", help="Scale over logical CPU devices (checks the code path, not scaling).")
    ] = False
    local_workers: Annotated[
        bool,
        typer.Option(
            "--local-workers",
            help="Run each count N as N MultiWorkerMirroredStrategy processes on this host (tensorflow).",
        ),
    ] = False
    timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="How long a run (a hung collective) may take before it is killed and recorded as timeout (bare: "
            "seconds).",
        ),
    ] = durations.spoken(scale_lib.DEFAULT_TIMEOUT_S)
    fit_check: Annotated[
        bool, typer.Option("--fit-check/--no-fit-check", help="Refuse per-GPU batches clearly over the GPU's memory.")
    ] = True
    batchnorm: Annotated[
        str,
        typer.Option(
            help="per-replica: batch-norm statistics per GPU (PyTorch DDP's, MirroredStrategy's); global: over "
            "the whole batch (Keras DataParallel's, synchronized=True on tensorflow)."
        ),
    ] = "per-replica"
    each_alone: Annotated[
        bool,
        typer.Option(
            "--each-alone/--no-each-alone",
            help="Also measure every GPU of the largest count alone, and judge each count against the slowest of "
            "its GPUs alone: a GPU slower on its own is not lost communication.",
        ),
    ] = True

    def options(self, protocol) -> scale_lib.ScaleOptions:
        counts, ids = counts_and_ids(self.gpu_counts, self.gpus, self.gpu_ids)
        return scale_lib.ScaleOptions(
            counts=parse_counts(counts),
            mode=self.mode,
            backend=self.backend,
            precision=self.precision,
            xla=self.xla,
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            data=self.data,
            gpu_ids=gpu_indices(ids),
            cpu=self.cpu,
            local_workers=self.local_workers,
            protocol=protocol.settings(),
            measure=measure_options(self.timeout, telemetry=True),
            fit_check=self.fit_check,
            batchnorm=parse_batchnorm(self.batchnorm),
            each_alone=self.each_alone,
        )


@dataclass
class MultiHost:
    hosts: Annotated[
        str | None, typer.Option(help="host:port,host:port: print the command each host runs for a multi-host run.")
    ] = None
    worker: Annotated[
        bool, typer.Option("--worker", help="Run this host's part of a multi-host run (TF_CONFIG set; see --hosts).")
    ] = False
    cluster_id: Annotated[
        str | None, typer.Option("--cluster", help="With --worker: the run's cluster id (printed by --hosts).")
    ] = None
    merge: Annotated[
        str | None, typer.Option("--merge", help="Merge the stored worker records of this cluster id into one run.")
    ] = None


ScaleProtocol = protocol_options(PROTOCOL)


@grouped
def scale(
    ctx: typer.Context,
    config: ScaleConfig,
    protocol: ScaleProtocol,
    multi: MultiHost,
    store_path: StorePath = None,
    as_json: AsJson = False,
) -> None:
    modes = [
        name for name, on in (("--hosts", multi.hosts), ("--worker", multi.worker), ("--merge", multi.merge)) if on
    ]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} exclude each other: use one")
    if multi.cluster_id and not multi.worker:
        raise UsageError("--cluster goes with --worker")
    if multi.merge:
        if config.workload:
            raise UsageError("--merge takes the cluster id alone; the workload comes from the records")
        _merge(multi.merge, store_path, as_json)
    if not config.workload:
        raise UsageError("name a workload, e.g. `gpuscout scale resnet50 --gpu-counts 1,2`")
    options = config.options(protocol)
    if multi.hosts:
        _print_hosts(ctx, config.workload, multi.hosts, config.backend, as_json)
    elif multi.worker:
        _worker(config.workload, options, multi.cluster_id, store_path, as_json)
    else:
        _here(config.workload, options, store_path, as_json)


def _here(workload: str, options: scale_lib.ScaleOptions, store_path: Path | None, as_json: bool) -> None:
    """Every count on this host's GPUs (or logical CPU devices), then the report."""
    with Nvml() as nvml:
        the_plan = scale_lib.plan(workload, options, nvml)
        session_report.folder("scale", store_path or default_store_path(), make=False)
        with Store(store_path) as store, run_bars(quiet=as_json) as bars:
            report = scale_lib.run_scale(the_plan, options, nvml, store, bars)
    save_and_show(report, "scale", store.path, as_json)
    raise typer.Exit(1 if any(p.status != "ok" for p in report.points) else 0)


def _print_hosts(ctx: typer.Context, workload: str, hosts: str, backend: str, as_json: bool) -> None:
    """The command each host runs: this command's options, every one the user gave, with
    --worker, the cluster and TF_CONFIG in place of --hosts (and of this host's --store)."""
    listed = cluster.check_hosts(hosts)
    if backend not in ("tensorflow", "auto"):
        raise UsageError("multi-host runs use MultiWorkerMirroredStrategy: --backend tensorflow")
    forwarded = given_args(
        ctx, exclude={"workload", "hosts", "worker", "cluster_id", "merge", "store_path", "as_json", "backend"}
    )
    emit(cluster.commands(workload, listed, ["--backend", "tensorflow", *forwarded]), as_json)


def _worker(
    workload: str, options: scale_lib.ScaleOptions, cluster_id: str | None, store_path: Path | None, as_json: bool
) -> None:
    """This host's part of a multi-host run, stored under the cluster id."""
    if not cluster_id:
        raise UsageError("--worker needs --cluster ID (printed by --hosts)")
    with Nvml() as nvml, Store(store_path) as store, run_bars(quiet=as_json) as bars:
        record = scale_lib.run_worker(workload, options, cluster_id, nvml, store, bars)
    emit(WorkerDone(record, store.path), as_json)
    raise typer.Exit(0 if record.ok else 1)


def _merge(cluster_id: str, store_path: Path | None, as_json: bool) -> None:
    with Store(store_path, create=False) as store:
        record = scale_lib.merge(cluster_id, store)
    emit(Merged(record), as_json)
    raise typer.Exit(0 if record.ok else 1)
