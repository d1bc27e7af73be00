"""Multi-worker runs: tf.distribute.MultiWorkerMirroredStrategy configured through TF_CONFIG.

A multi-host run is one worker process per host, each told the cluster and its own place in it
by the TF_CONFIG environment variable (the tf.distribute multi-worker guide). gpuscout prints
the command each host runs (``gpuscout scale W --hosts a:2222,b:2222``); each worker measures
the protocol on its GPUs and stores its own record, tagged with the cluster id; the records are
brought to one store (``results export --group`` / ``results import``) and merged into one
record of the whole run (``gpuscout scale --merge ID``).

Workers agree on the window length before timing (backends/tensorflow_steps.py, _agree), so
their windows cover the same steps; the run's throughput in a window is the sum of the
workers' (synchronous training: every worker does one step of its own batch per global step).
The same code runs several workers on one host (``--local-workers``), which is how CI tests it.
"""

from __future__ import annotations

import json
import shlex
import socket
import threading
import uuid

from gpuscout.analysis.derive import RunContext, derive
from gpuscout.catalog.pricing import PricingOptions
from gpuscout.core.errors import UsageError, host_port
from gpuscout.core.provenance import utc_now
from gpuscout.core.spec import RunSpec
from gpuscout.executor.local import child_env
from gpuscout.measure import engine
from gpuscout.record.child import ChildOutcome, ChildResult, ChildWindow, DistributionDetails
from gpuscout.record.run import ClusterTag, Distribution, Flag, RunRecord
from gpuscout.scale.results import ClusterPlan, HostCommand


def tf_config(addresses: list[str], index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def read_tf_config(text: str | None) -> tuple[list[str], int]:
    """(the workers' addresses, this worker's index) from TF_CONFIG, or a UsageError saying what is wrong."""
    if not text:
        raise UsageError("--worker needs TF_CONFIG in the environment: `gpuscout scale W --hosts ...` prints it")
    try:
        config = json.loads(text)
        workers = list(config["cluster"]["worker"])
        task = config["task"]
        index = int(task["index"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"TF_CONFIG is not a worker cluster config ({type(exc).__name__}: {exc}); expected "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": N}}'
        ) from None
    if task.get("type") != "worker" or not 0 <= index < len(workers):
        raise UsageError(f"TF_CONFIG's task must be a worker with an index below {len(workers)}, got {task}")
    return workers, index


def check_hosts(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    bad = [h for h in hosts if h.count(":") != 1 or host_port(h) is None]
    if len(hosts) < 2 or bad:
        raise UsageError(
            f"--hosts takes two or more host:port pairs like a:2222,b:2222 (ports 1 to 65535), got "
            f"{text[:80]!r}" + (f" ({bad[0][:40]!r} is not host:port)" if bad else "")
        )
    return hosts


def commands(workload: str, hosts: list[str], worker_args: list[str]) -> ClusterPlan:
    """What each host runs, and how the records come together afterwards."""
    cluster_id = uuid.uuid4().hex[:8]
    args = " ".join(shlex.quote(a) for a in worker_args)
    per_host = [
        HostCommand(
            h.split(":")[0],
            f"TF_CONFIG={shlex.quote(tf_config(hosts, i))} gpuscout scale {shlex.quote(workload)} --worker "
            f"--cluster {cluster_id}" + (f" {args}" if args else ""),
        )
        for i, h in enumerate(hosts)
    ]
    merge = [
        f"gpuscout results export --group {cluster_id} -o {cluster_id}-worker{i}.json   # on {p.host}"
        for i, p in enumerate(per_host)
        if i
    ]
    merge += [
        f"gpuscout results import {cluster_id}-worker{i}.json   # on {per_host[0].host}"
        for i in range(1, len(per_host))
    ]
    merge.append(f"gpuscout scale --merge {cluster_id}   # on {per_host[0].host}")
    return ClusterPlan(cluster_id, per_host, merge)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_local_workers(
    spec: RunSpec, gpu_ids: list[int | None], session: engine.Session, on_event=lambda event: None
) -> list[RunRecord]:
    """len(gpu_ids) workers of one MultiWorkerMirroredStrategy run on this host, one device each
    (a GPU, or the CPU for None); their records, worker 0 first. If one fails, the others are
    stopped: they would wait for it in the next collective until the timeout."""
    addresses = [f"localhost:{_free_port()}" for _ in gpu_ids]
    cluster_id = uuid.uuid4().hex[:8]
    records: list[RunRecord | None] = [None] * len(gpu_ids)
    failed = threading.Event()

    def work(index: int) -> None:
        mine = spec.model_copy(
            update={"gpu_index": gpu_ids[index], "gpu_indices": None if gpu_ids[index] is None else (gpu_ids[index],)}
        )
        env = {**child_env(mine), "TF_CONFIG": tf_config(addresses, index)}
        record = engine.measure(
            mine, session, env=env, cancel=failed, on_event=on_event if index == 0 else lambda event: None
        )[0]
        records[index] = record.model_copy(
            update={"cluster": ClusterTag(id=cluster_id, index=index, workers=len(gpu_ids), address=addresses[index])}
        )
        if not record.ok:
            failed.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(gpu_ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def merge_records(workers: list[RunRecord], pricing: PricingOptions = PricingOptions()) -> RunRecord:
    """One record for a multi-worker run from its workers' records (see the module's docstring),
    derived by analysis/derive.py like every other record."""
    workers = sorted(workers, key=lambda r: r.cluster.index)
    indices = [r.cluster.index for r in workers]
    expected = workers[0].cluster.workers
    if indices != list(range(expected)):
        raise UsageError(
            f"cluster {workers[0].cluster.id}: have the records of workers {indices}, need "
            f"all of 0..{expected - 1}: import the missing hosts' exports first"
        )
    first = workers[0]
    broken = [r for r in workers if not r.ok]
    if not broken and len({len(r.windows) for r in workers}) != 1:
        raise UsageError(
            f"cluster {first.cluster.id}: workers timed different numbers of windows "
            f"{sorted({len(r.windows) for r in workers})}"
        )
    outcome = _merged_outcome(workers, broken)
    per_gpu = [
        t.model_copy(update={"index": f"{r.cluster.index}:{t.index}"})
        for r in workers
        for t in (
            r.telemetry_per_gpu
            or ([r.telemetry.model_copy(update={"index": r.gpu.index if r.gpu else None})] if r.telemetry else [])
        )
    ]
    ctx = RunContext(
        gpus=[g for r in workers for g in (r.gpus or ([r.gpu] if r.gpu else []))],
        environment=first.env.model_dump(exclude={"child_env", "framework", "compiled"}),
        child_env=first.env.child_env,
        group_id=first.group_id,
        telemetry=lambda windows, samples: per_gpu,
        pricing=pricing,
        totals=(sum(r.batch_size for r in workers), sum(r.devices for r in workers)),
        inherited_flags=[f for f in _unique_flags(workers) if f.code in ("gpu_shared", "loss_not_finite")],
    )
    merged = derive(first.spec, outcome, ctx)[0]
    distribution = (first.distribution or Distribution(kind="multi_worker")).model_copy(
        update={
            "workers": expected,
            "replicas": merged.devices,
            "worker_run_ids": [r.id for r in workers],
            "addresses": [r.cluster.address for r in workers],
        }
    )
    return merged.model_copy(
        update={
            "distribution": distribution,
            "created_utc": utc_now(),
            "cluster": first.cluster.model_copy(update={"index": None, "role": "merged"}),
            "input_wait_share": max(
                (r.input_wait_share for r in workers if r.input_wait_share is not None), default=None
            ),
            "peak_memory_bytes": max((r.peak_memory_bytes for r in workers if r.peak_memory_bytes), default=None),
        }
    )


def _merged_outcome(workers: list[RunRecord], broken: list[RunRecord]) -> ChildOutcome:
    """The whole run as if one child had measured it: each window's samples summed over the
    workers (synchronous training: every worker does one step of its own batch per global step),
    its length such that the rate is the sum of the workers' rates."""
    first = workers[0]
    if broken:
        # The first failure is the cause; the others were stopped because of it.
        cause = min(broken, key=lambda r: (r.error.message or "").startswith("stopped:"))
        return ChildOutcome(
            cause.status,
            None,
            f"worker {cause.cluster.index}: {cause.error.message}",
            cause.error.stderr_tail,
            cause.error.returncode,
            max(r.duration_s for r in workers),
        )
    windows = []
    for parts in zip(*(r.windows for r in workers)):
        samples = sum(w.samples for w in parts)
        rate = sum(w.throughput for w in parts)  # units/s of each worker, summed
        seconds = samples * first.units_per_sample / rate
        windows.append(
            ChildWindow(
                index=parts[0].index,
                start_monotonic_s=parts[0].start_monotonic_s,
                end_monotonic_s=parts[0].start_monotonic_s + seconds,
                steps=parts[0].steps,
                samples=samples,
                input_wait_s=max(w.input_wait_s for w in parts),
            )
        )
    result = ChildResult(
        framework=first.env.framework,
        compiled=first.env.compiled,
        compile_s=first.compile_s,
        warmup_s=first.warmup_s,
        steps_per_window=first.steps_per_window,
        windows=windows,
        loss=first.loss,
        fixed_step_loss=first.fixed_step_loss,
        fixed_steps=first.fixed_steps,
        host_peak_rss_bytes=first.host_peak_rss_bytes,
        distribution=first.distribution.model_dump(include=set(DistributionDetails.model_fields))
        if first.distribution
        else None,
    )
    return ChildOutcome("ok", result, duration_s=max(r.duration_s for r in workers))


def _unique_flags(workers: list[RunRecord]) -> list[Flag]:
    seen: dict[str, Flag] = {}
    for r in workers:
        for f in r.flags:
            seen.setdefault(f.code, f)
    return list(seen.values())
