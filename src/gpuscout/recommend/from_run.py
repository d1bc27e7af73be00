"""`gpuscout recommend --from RUN`: a stored run (a watched script, a tune variant, a benchmark)
read as the job it trained and what it measured (recommend/stored_run.py reads it,
recommend/measured.py predicts it elsewhere), ranked on every catalog GPU, with the cost of a
sweep of it (recommend/sweep_cost.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

from gpuscout.analysis.device_causes import jax_preallocated
from gpuscout.catalog import Catalog, predict
from gpuscout.core.spec import Precision
from gpuscout.recommend import ranking, sweep_cost
from gpuscout.recommend.jobs import STATE_BYTES_PER_PARAM, Job, job_for_workload, measured_scaling, workload_kind
from gpuscout.recommend.measured import MeasuredRun, describe, fix_first
from gpuscout.recommend.stored_run import measured_run, precision_of
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord
from gpuscout.record.trial import StoredTrial
from gpuscout.record.watch import WatchRecord


def job_from_run(record: StoredRecord, m: MeasuredRun, dataset_size: float | None) -> Job:
    """The run's own job: its model, batch, precision and the training it planned (fit's epochs x
    steps per epoch; `dataset_size` samples per epoch instead when given)."""
    precision = precision_of(record)
    name = f"{record.workload} (run {record.id})"
    if isinstance(record, RunRecord) and workload_kind(record.workload) is not None:
        # gpuscout's own workload: its memory model and intensity, the run's own throughput
        job = job_for_workload(
            record.workload,
            precision,
            record.batch_size,
            record.seq_len,
            [],
            None if dataset_size is None else dataset_size * record.units_per_sample,
        )
        return Job(**{**job.__dict__, "name": name, "measured": m, "references": []})
    if isinstance(record, RunRecord):  # a user's model benchmarked with --model
        info = record.spec.model_info
        batch, peak, params = record.batch_size, record.peak_memory_bytes, info.params if info else None
        peak_basis, epoch = "the allocator's peak", dataset_size
    else:
        main = record.main
        batch = record.batch_size or (main.batch_size if main else None) or 1
        peak, params = _peak_bytes(record), main.params if main and main.params else None
        peak_basis = _peak_basis(record)
        epoch = dataset_size if dataset_size is not None else _epoch_samples(record, batch)
    fixed = (
        min(STATE_BYTES_PER_PARAM * params, peak)
        if params and peak
        else (STATE_BYTES_PER_PARAM * params if params else 0.0)
    )
    per_sample = max(0.0, (peak - fixed) / batch) if peak else 0.0
    if peak:
        basis = (
            f"measured: {peak / 1e9:.1f} GB at batch {batch} (run {record.id}, {peak_basis}), "
            f"{fixed / 1e9:.2f} GB of it the training state ({STATE_BYTES_PER_PARAM} B/parameter), "
            "the rest scaled with the batch"
        )
    else:
        why = (
            "NVML shows what JAX's preallocation reserved, not what the training used: "
            "watch it with XLA_PYTHON_CLIENT_PREALLOCATE=false to measure it"
            if isinstance(record, WatchRecord) and jax_preallocated(record)
            else "no allocator peak or NVML"
        )
        basis = (
            f"not measured ({why}): 16 B/parameter of training state only, a lower bound"
            if params
            else f"not measured ({why}), and the model's size unknown: fits cannot be judged"
        )
    flops = m.training_flops_per_sample or 0.0
    half_bytes = per_sample / (1 if precision is not Precision.fp32 else 2)
    intensity = flops / half_bytes if flops and half_bytes else predict.INTENSITY_HALF_POINT
    return Job(
        name=name,
        unit="samples",
        units_per_sample=1,
        training_flops_per_unit=flops,
        intensity=intensity,
        fixed_bytes=fixed,
        per_sample_bytes=per_sample,
        memory_basis=basis,
        batch_size=batch,
        precision=precision,
        kind="transformer",
        dataset_units=epoch,
        measured=m,
    )


def planned_epochs(record: StoredRecord) -> float | None:
    main = record.main if isinstance(record, WatchRecord) else None
    return float(main.epochs_planned) if main and main.epochs_planned else None


def _epoch_samples(r: WatchRecord, batch: int) -> float | None:
    main = r.main
    if main is None:
        return None
    if main.steps_per_epoch:
        return float(main.steps_per_epoch * batch)
    whole = [e for e in main.epochs if e.steps]
    return float(whole[0].samples) if whole else None


def _peak_bytes(r: WatchRecord) -> float | None:
    """The run's own memory per GPU: the allocator's peak, else NVML's most used less what other
    processes held."""
    main = r.main
    if main and main.peak_memory_bytes:
        return float(main.peak_memory_bytes)
    if r.telemetry and r.telemetry.memory_used_max_bytes and not jax_preallocated(r):
        return float(max(0, r.telemetry.memory_used_max_bytes - _others_bytes(r)))
    return None


def _peak_basis(r: WatchRecord) -> str:
    main = r.main
    if main and main.peak_memory_bytes:
        return "the allocator's peak"
    others = _others_bytes(r)
    return "NVML's most used" + (f", less {others / 1e9:.1f} GB other processes held" if others else "")


def _others_bytes(r: WatchRecord) -> int:
    """What other processes held on the measured GPU when the watch began."""
    return sum(p.used_memory_bytes or 0 for p in (r.gpu.compute_processes if r.gpu else []))


# ---------------------------------------------------------------- the whole answer


@dataclass
class Recommendation:
    """`recommend --from RUN`'s answer: the run's job on every catalog GPU, and a sweep of it."""

    job: Job
    measured: MeasuredRun
    epochs: float
    rows: list  # rank.Row, best first
    sweep: object | None  # sweep_cost.SweepEstimate (--trials)
    basis: str
    fix_first: str | None

    def to_dict(self) -> dict:
        m = self.measured
        split = (
            None
            if m.split is None
            else {
                "gpu_share": m.split.gpu_share,
                "input_share": m.split.input_share,
                "host_share": m.split.host_share,
                "basis": m.split.basis,
            }
        )
        return {
            "from": {
                "run": m.run_id,
                "kind": m.record_kind,
                "device": m.device_label,
                "gpu": m.gpu.id if m.gpu else None,
                "samples_per_s": m.samples_per_s,
                "split": split,
                "input_cap_samples_per_s": (
                    m.samples_per_s / m.split.fixed_share
                    if m.samples_per_s and m.split and m.split.fixed_share
                    else None
                ),
                "epoch_overhead_s": m.epoch_overhead_s,
                "epoch_host_s": m.epoch_host_s,
                "startup_s": m.startup_s,
                "compile_s": m.compile_s,
                "backend": m.backend,
                "basis": self.basis,
                "fix_first": self.fix_first,
                "ended": m.ended,
            },
            "epochs": self.epochs,
            "sweep": self.sweep.to_dict() if self.sweep is not None else None,
        }


def recommendation(
    record: StoredRecord,
    catalog: Catalog,
    constraints,
    pricing,
    *,
    bench_records: list[RunRecord] = (),
    sweeps: dict[str, list[StoredTrial]] | None = None,
    dataset_size: float | None = None,
    epochs: float | None = None,
    trials: int | None = None,
    watch_records: list[WatchRecord] = (),
) -> Recommendation:
    """The run's job ranked on every GPU (`constraints.epochs` set from the run unless `epochs`).
    `watch_records`: the store's watched runs, where a run on several devices finds its one-device
    peer, and so its own data-parallel efficiency."""
    m = measured_run(record, catalog)
    job = job_from_run(record, m, dataset_size)
    job.scaling = measured_scaling(list(bench_records), workload_kind(record.workload))
    if isinstance(record, WatchRecord) and m.devices > 1 and m.gpu is not None:
        m = _spread(record, m, job, list(watch_records))
        job.measured = m
    constraints.epochs = epochs or planned_epochs(record) or 1.0
    rows = ranking.rank(job, catalog, constraints, pricing)
    estimate = None
    if trials:
        watched = m.record_kind == "watch"
        measured = sweep_cost.find_measured(m.command, sweeps or {}, catalog) if watched else None
        other = sweep_cost.unlike(m.command, sweeps or {}) if watched and measured is None else None
        estimate = sweep_cost.estimate(job, rows, trials, constraints.epochs, constraints.max_gpus, measured, other)
    return Recommendation(job, m, constraints.epochs, rows, estimate, describe(m), fix_first(m))


def one_device_peer(record: WatchRecord, watches: list[WatchRecord]) -> WatchRecord | None:
    """The same script timed on one device of the same GPU kind: of the same tune session when
    there is one (its baseline, beside the data_parallel run), else the nearest in time."""

    def same(r: WatchRecord) -> bool:
        return (
            r.id != record.id
            and r.ok
            and bool(r.windows_samples_per_s)
            and r.workload == record.workload
            and r.main is not None
            and r.main.replicas == 1
            and r.gpu is not None
            and record.gpu is not None
            and r.gpu.name == record.gpu.name
        )

    peers = [r for r in watches if same(r)]
    return min(peers, key=lambda r: (r.group_id != record.group_id, abs(_seconds(r) - _seconds(record))), default=None)


def _seconds(r: WatchRecord) -> float:
    return datetime.fromisoformat(r.created_utc).timestamp()


def _spread(record: WatchRecord, m: MeasuredRun, job: Job, watches: list[WatchRecord]) -> MeasuredRun:
    """A run on N devices predicts from its own data-parallel efficiency: against its one-device
    peer where the store has one (at N, measured; at other counts, the same loss per doubling),
    else what `scale` expects over the interconnect, said as assumed."""
    n, gpu = m.devices, m.gpu
    peer = one_device_peer(record, watches)
    if peer is None:
        eff, why = ranking.efficiency(job, gpu, n)
        return replace(m, efficiency=eff, efficiency_basis=why or "efficiency assumed")
    eff = record.windows_samples_per_s / (n * peer.windows_samples_per_s)
    why = (
        f"{eff:.0%} data-parallel efficiency measured: {record.windows_samples_per_s:,.0f} samples/s on {n} against "
        f"{peer.windows_samples_per_s:,.0f} on one (run {peer.id})"
    )
    for k in ranking.GPU_COUNTS:
        if k > 1 and (k == n or (gpu.id, k) not in job.scaling):  # at n, the script's own over a scale session's
            at_k = eff ** (math.log2(k) / math.log2(n))
            job.scaling[(gpu.id, k)] = (
                at_k,
                why
                if k == n
                else f"{at_k:.0%} data-parallel efficiency, from this script's {eff:.0%} on {n} "
                "(the same loss per doubling)",
            )
    return replace(m, efficiency=eff, efficiency_basis=why)
