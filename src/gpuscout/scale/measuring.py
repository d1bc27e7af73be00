"""A `scale` session run: each count measured and stored, a worker of a multi-host run, and the
workers' records merged."""

from __future__ import annotations

import time

from gpuscout.catalog.pricing import PricingOptions
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Distribution, build_spec
from gpuscout.measure import engine
from gpuscout.record.run import ClusterTag, RunRecord, ScaleTag
from gpuscout.scale import cluster
from gpuscout.scale.counts import Plan, ScaleOptions, plan
from gpuscout.scale.efficiency import analyse
from gpuscout.scale.results import ScaleReport
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml, topology


def run_scale(
    the_plan: Plan, options: ScaleOptions, nvml: Nvml, store: Store, progress: engine.Progress | None = None
) -> ScaleReport:
    progress = progress or engine.Progress()
    session = engine.Session(nvml, options.measure)
    started = time.monotonic()
    records: dict[int, RunRecord] = {}
    alone: dict[int, RunRecord] = {}
    # each GPU alone right after GPU 0's one-GPU run: the GPUs are compared in the same state
    runs = (
        [(n, spec, None) for n, spec in zip(the_plan.counts[:1], the_plan.specs[:1])]
        + [(1, spec, g) for g, spec in the_plan.alone]
        + [(n, spec, None) for n, spec in zip(the_plan.counts[1:], the_plan.specs[1:])]
    )
    for number, (n, spec, gpu) in enumerate(runs, 1):
        label = (
            f"{n} {'GPU' if the_plan.device_kind == 'gpu' else 'CPU device'}{'s' if n > 1 else ''}"
            + (f" ({n} worker process{'es' if n > 1 else ''})" if options.local_workers else "")
            + (f" (GPU {gpu} alone)" if gpu is not None else "")
        )
        progress.run_started(spec, label, number, len(runs))
        tag = ScaleTag(
            session=session.group_id, mode=the_plan.mode, devices=n, role="alone" if gpu is not None else None
        )
        if options.local_workers:
            ids = ([gpu] if gpu is not None else the_plan.gpu_ids[:n]) if the_plan.device_kind == "gpu" else [None] * n
            workers = cluster.run_local_workers(spec, ids, session, on_event=lambda e, s=spec: progress.event(s, e))
            engine.keep(
                store,
                [w.model_copy(update={"scale": tag.model_copy(update={"role": "worker"})}) for w in workers],
                progress,
            )
            record = cluster.merge_records(workers, session.options.pricing)
        else:
            record = engine.measure(spec, session, on_event=lambda e, s=spec: progress.event(s, e))[0]
        record = record.model_copy(update={"scale": tag})
        engine.keep(store, [record], progress)
        if gpu is None:
            records[n] = record
        else:
            alone[gpu] = record
        progress.run_finished(label, [record])
    if the_plan.alone and 1 in records:
        alone[the_plan.gpu_ids[0]] = records[1]
    links = topology(nvml, the_plan.gpu_ids[: the_plan.counts[-1]]) if the_plan.device_kind == "gpu" else []
    report = analyse(records, the_plan.mode, links, the_plan.device_kind, alone, the_plan.gpu_ids)
    return report.model_copy(
        update={
            "session": session.group_id,
            "workload": the_plan.workload,
            "elapsed_s": time.monotonic() - started,
            "notes": the_plan.notices,
            "local_workers": options.local_workers,
            "gpu_ids": the_plan.gpu_ids,
        }
    )


def run_worker(
    workload_name: str,
    options: ScaleOptions,
    cluster_id: str,
    nvml: Nvml,
    store: Store,
    progress: engine.Progress | None = None,
) -> RunRecord:
    """One host's worker of a multi-host run (TF_CONFIG in the environment): its record, stored
    under the cluster id for `results export --group` and `scale --merge`."""
    import os

    addresses, index = cluster.read_tf_config(os.environ.get("TF_CONFIG"))
    if len(options.counts) != 1:
        raise UsageError("a --worker takes one --gpu-counts value: the GPUs of this host it trains on")
    the_plan = plan(workload_name, options, nvml)
    spec = the_plan.specs[-1]
    if spec.backend.value != "tensorflow":
        raise UsageError("multi-host runs use MultiWorkerMirroredStrategy: add --backend tensorflow")
    spec = build_spec(**{**spec.model_dump(), "distribution": Distribution.multi_worker})
    progress = progress or engine.Progress()
    label = f"worker {index} of {len(addresses)}"
    progress.run_started(spec, label, 1, 1)
    session = engine.Session(nvml, options.measure, group_id=cluster_id)
    record = engine.measure(spec, session, on_event=lambda e: progress.event(spec, e))[0]
    record = record.model_copy(
        update={
            "cluster": ClusterTag(id=cluster_id, index=index, workers=len(addresses), address=addresses[index]),
            "scale": ScaleTag(session=cluster_id, mode=options.mode, devices=spec.devices, role="worker"),
        }
    )
    engine.keep(store, [record], progress)
    progress.run_finished(label, [record])
    return record


def merge(cluster_id: str, store: Store, pricing: PricingOptions = PricingOptions()) -> RunRecord:
    """The workers' records of a multi-host run (all in this store) merged into one, stored."""
    workers = [
        r
        for r in store.list(group=cluster_id, kind="benchmark")
        if r.cluster is not None and r.cluster.role != "merged"
    ]
    if not workers:
        raise UsageError(
            f"no worker records of cluster {cluster_id!r} in {store.path}: import each host's "
            f"`gpuscout results export --group {cluster_id}` first"
        )
    merged = cluster.merge_records(workers, pricing)
    merged = merged.model_copy(
        update={
            "scale": ScaleTag(
                session=cluster_id,
                mode=workers[0].scale.mode if workers[0].scale else None,
                devices=merged.devices,
                role="merged",
            )
        }
    )
    store.put(merged)
    return merged
