"""`gpuscout scale`: how training speeds up over the GPUs of this host.

For each GPU count one ordinary benchmark run (a child, the measurement protocol, telemetry of
every GPU it uses, stored with a `scale` tag), all through the same data-parallel code path,
the one-GPU point included: tf.distribute.MirroredStrategy (NCCL all-reduce) on tensorflow,
keras.distribution.DataParallel on jax. With `local_workers`, each count N instead runs N worker
processes of MultiWorkerMirroredStrategy on this host (cluster.py), the code path of a
multi-host run. Then speedup, efficiency and the time outside compute against the one-GPU
point, the interconnect NVML reports, and a verdict with the likely cause (analysis/scaling.py).

Weak scaling (the default) keeps the per-GPU batch and grows the global batch with the GPUs;
strong scaling keeps the global batch and splits it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gpuscout import catalog, workloads

from gpuscout.scale import cluster

from gpuscout.measure import engine, planning
from gpuscout.analysis import communication, scaling
from gpuscout.analysis.compare import ratio_ci
from gpuscout.core.errors import UsageError, parse_positive_ints, parse_whole_numbers
from gpuscout.catalog.pricing import PricingOptions
from gpuscout.record.run import ClusterTag, RunRecord, ScaleTag
from gpuscout.core.spec import PROTOCOL, BatchNormStats, Distribution, Protocol, RunSpec, build_spec
from gpuscout.store import Store
from gpuscout.telemetry.nvml import TOPOLOGY_LEVELS, Nvml, topology
from gpuscout.workloads import sizing

MODES = ("weak", "strong")
# A collective that hangs (a NCCL deadlock, a lost peer) never returns: each count's run is
# killed after this long. Compilation plus the protocol takes 1-3 minutes for the suite's
# models on an H200 (docs/benchmarks.md), so 15 minutes is a hang, not a slow run.
DEFAULT_TIMEOUT_S = 900.0


@dataclass
class ScaleOptions:
    counts: tuple[int, ...] = (1, 2)
    mode: str = "weak"
    backend: str = "auto"
    precision: str = "fp32"
    xla: bool | None = None  # None: what the backend does under a strategy (jax on, tensorflow off)
    batch_size: int | None = None  # weak: per GPU; strong: global. None: the workload's default
    seq_len: int | None = None
    data: str = "synthetic"
    gpu_ids: tuple[int, ...] | None = None  # which GPUs; counts take the first N. None: 0, 1, ...
    cpu: bool = False
    local_workers: bool = False  # each count N as N MultiWorkerMirroredStrategy processes
    protocol: Protocol = PROTOCOL
    measure: engine.MeasureOptions = field(default_factory=lambda: engine.MeasureOptions(timeout_s=DEFAULT_TIMEOUT_S))
    seed: int = 0
    fit_check: bool = True
    batchnorm: str = "per_replica"  # per_replica | global (spec.BatchNormStats)
    # Measure each GPU of the largest count alone too, and judge each count against the slowest
    # of its GPUs alone (analysis/scaling.against_each_alone); CPU devices share one CPU: never
    each_alone: bool = True


@dataclass
class Plan:
    workload: str
    specs: list[RunSpec]  # one per count (with local workers: worker 0's; cluster.py makes the others)
    counts: list[int]
    mode: str
    device_kind: str
    gpu_ids: list[int]
    notices: list[str]
    alone: list[tuple[int, RunSpec]] = field(default_factory=list)  # (GPU, its one-GPU run) past the first


def parse_batchnorm(text: str) -> BatchNormStats:
    try:
        return BatchNormStats(text.replace("-", "_"))
    except ValueError:
        raise UsageError(f"--batchnorm {text!r}: use per-replica (statistics per GPU, as DDP and MirroredStrategy) "
                         "or global (over the whole batch, as Keras' DataParallel)") from None


def parse_counts(text: str) -> tuple[int, ...]:
    return parse_positive_ints(text, "--gpus", "GPU counts", "1,2,4")


def parse_ids(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    # in the order given: the first is the one-GPU run's (NVML numbers GPUs from 0; 1024 is far past any host)
    return parse_whole_numbers(text, "--gpu-ids", "distinct GPU indices", "0,1,3", least=0, most=1023, sort=False)


def plan(workload_name: str, options: ScaleOptions, nvml: Nvml) -> Plan:
    """Validate everything before any run (exit 2 on bad input, nothing run)."""
    workload = workloads.get(workload_name)
    if options.mode not in MODES:
        raise UsageError(f"unknown --mode {options.mode!r}: choose weak or strong")
    planning.above_zero("--timeout", options.measure.timeout_s, " seconds")
    planning.at_least("--batch-size", options.batch_size, 1)
    options.measure.pricing.check()
    notices = []
    counts = sorted(set(options.counts) | {1})
    if 1 not in options.counts:
        notices.append("added the 1-device run: speedup and efficiency are measured against it")
    backend = planning.backend(options.backend)
    if options.local_workers and backend.value != "tensorflow":
        raise UsageError("--local-workers runs MultiWorkerMirroredStrategy, a tensorflow strategy: add "
                         "--backend tensorflow (the jax backend scales over one host's GPUs with DataParallel)")
    device_kind, gpu_ids = _devices(options, counts, nvml, notices)
    precision = planning.precision(backend, options.precision, nvml, gpu_ids[0] if gpu_ids else None)
    seq_len = planning.seq_len(workload, options.seq_len)
    base_batch = options.batch_size or workload.default_batch_size
    if options.mode == "strong":
        uneven = [n for n in counts if base_batch % n]
        if uneven:
            raise UsageError(f"strong scaling splits the global batch {base_batch} over the GPUs: it does not "
                             f"divide by {', '.join(map(str, uneven))}; pick a --batch-size divisible by every count")
    distribution = Distribution.multi_worker if options.local_workers else Distribution.mirrored
    batchnorm = parse_batchnorm(options.batchnorm)
    specs = []
    for n in counts:
        per_device = base_batch if options.mode == "weak" else base_batch // n
        if options.fit_check and device_kind == "gpu":
            planning.fits(workload, per_device, precision, seq_len, planning.memory_total(nvml, gpu_ids[0]), " per GPU")
        devices = 1 if options.local_workers else n  # local workers: n processes of one device each
        ids = tuple(gpu_ids[:devices]) if device_kind == "gpu" else None
        specs.append(build_spec(
            workload=workload.name, backend=backend, precision=precision,
            xla=planning.xla(backend, options.xla, distribution, on_gpu=device_kind == "gpu"),
            batch_size=per_device * devices,
            seq_len=seq_len, data=options.data, **options.protocol.model_dump(), seed=options.seed,
            gpu_index=ids[0] if ids else None, gpu_indices=ids, devices=devices, distribution=distribution,
            batchnorm=batchnorm if n > 1 else None))
    alone = [(g, specs[0].model_copy(update={"gpu_index": g, "gpu_indices": (g,)}))
             for g in gpu_ids[1:counts[-1]]] if options.each_alone and device_kind == "gpu" else []
    return Plan(workload.name, specs, counts, options.mode, device_kind, gpu_ids, notices, alone)


def _devices(options: ScaleOptions, counts: list[int], nvml: Nvml, notices: list[str]) -> tuple[str, list[int]]:
    """("gpu" and the GPUs to use, the first N for a count N) or ("cpu", []) for logical CPU devices."""
    if options.cpu or not nvml.available or nvml.count == 0:
        if options.gpu_ids:
            raise UsageError("--gpu-ids names GPUs; this run is on the CPU" if options.cpu else
                             f"--gpu-ids given, but NVML found no GPU ({nvml.error or 'none'}): run `gpuscout doctor`")
        if not options.cpu:  # a run over CPU devices is asked for, never fallen into
            raise UsageError(f"no NVIDIA GPU found ({nvml.error or 'NVML reports none'}): `gpuscout doctor` says why; "
                             "add --cpu to scale over logical CPU devices instead (they share this CPU's cores: a "
                             "check of the code path, not of scaling)")
        if counts[-1] > 8:
            raise UsageError(f"--gpus {counts[-1]} on the CPU: at most 8 logical CPU devices")
        return "cpu", []
    gpu_ids = planning.gpu_indices(list(options.gpu_ids if options.gpu_ids is not None else range(nvml.count)), nvml)
    if counts[-1] > len(gpu_ids):
        raise UsageError(f"--gpus {counts[-1]} asks for more GPUs than "
                         + (f"--gpu-ids lists ({len(gpu_ids)})" if options.gpu_ids is not None else
                            f"this machine has ({nvml.count} visible)")
                         + f": use counts up to {len(gpu_ids)}")
    return "gpu", gpu_ids


def run_scale(the_plan: Plan, options: ScaleOptions, nvml: Nvml, store: Store,
              progress: engine.Progress | None = None) -> dict:
    progress = progress or engine.Progress()
    session = engine.Session(nvml, options.measure)
    started = time.monotonic()
    records: dict[int, RunRecord] = {}
    alone: dict[int, RunRecord] = {}
    # each GPU alone right after GPU 0's one-GPU run: the GPUs are compared in the same state
    runs = [(n, spec, None) for n, spec in zip(the_plan.counts[:1], the_plan.specs[:1])] + \
           [(1, spec, g) for g, spec in the_plan.alone] + \
           [(n, spec, None) for n, spec in zip(the_plan.counts[1:], the_plan.specs[1:])]
    for number, (n, spec, gpu) in enumerate(runs, 1):
        label = f"{n} {'GPU' if the_plan.device_kind == 'gpu' else 'CPU device'}{'s' if n > 1 else ''}" + (
            f" ({n} worker process{'es' if n > 1 else ''})" if options.local_workers else "") + (
            f" (GPU {gpu} alone)" if gpu is not None else "")
        progress.run_started(spec, label, number, len(runs))
        tag = ScaleTag(session=session.group_id, mode=the_plan.mode, devices=n,
                       role="alone" if gpu is not None else None)
        if options.local_workers:
            ids = ([gpu] if gpu is not None else the_plan.gpu_ids[:n]) if the_plan.device_kind == "gpu" else [None] * n
            workers = cluster.run_local_workers(spec, ids, session, on_event=lambda e, s=spec: progress.event(s, e))
            engine.keep(store, [w.model_copy(update={"scale": tag.model_copy(update={"role": "worker"})})
                                for w in workers], progress)
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
    links = topology(nvml, the_plan.gpu_ids[:the_plan.counts[-1]]) if the_plan.device_kind == "gpu" else []
    report = analyse(records, the_plan.mode, links, the_plan.device_kind, alone, the_plan.gpu_ids)
    report.update({"session": session.group_id, "workload": the_plan.workload,
                   "elapsed_s": time.monotonic() - started, "notes": the_plan.notices,
                   "local_workers": options.local_workers, "gpu_ids": the_plan.gpu_ids})
    return report


def interconnect(links) -> dict | None:
    """One line for the GPUs' links: NVLink when every pair has it, else the farthest PCIe path."""
    if not links:
        return None
    if all(link.interconnect == "NVLink" for link in links):
        counts = sorted({c for link in links for c in link.nvlinks if c is not None})
        detail = f"NVLink, {'/'.join(map(str, counts))} active links per GPU" if counts else "NVLink"
        return {"kind": "NVLink", "detail": detail}
    order = [name for name, _ in TOPOLOGY_LEVELS.values()]
    worst = max((link for link in links if link.interconnect == "PCIe"),
                key=lambda link: order.index(link.pcie_level) if link.pcie_level in order else -1)
    return {"kind": "PCIe", "detail": f"PCIe only: GPUs {worst.gpus[0]} and {worst.gpus[1]} meet at "
            f"{worst.pcie_path or 'an unknown level'} ({worst.pcie_level or '?'})"}


def analyse(records: dict[int, RunRecord], mode: str, links, device_kind: str,
            alone: dict[int, RunRecord] | None = None, gpu_ids: list[int] = ()) -> dict:
    """The scaling table and the verdict from the records of each count; with `alone` (GPU -> its
    one-GPU run), each count is judged against the slowest of its GPUs alone."""
    rates = {g: (a.samples_per_s, a.window_samples_per_s()) for g, a in (alone or {}).items() if a.ok and a.samples_per_s}
    base = records.get(1)
    base_ok = base is not None and base.ok
    connection = interconnect(links)
    link = connection["kind"] if connection else None
    first = next(iter(records.values()))
    entry = catalog.match(first.gpu.name) if first.gpu else None
    gbs = scaling.link_gbs(link, entry.nvlink_gbs if entry else None, entry.pcie_gen if entry else None)
    largest_batch = sizing.fitting_batch(workloads.get(first.workload), first.precision, first.seq_len,
                                         first.gpu.memory_total_bytes) if device_kind == "gpu" and first.gpu else None
    points = []
    for n, r in sorted(records.items()):
        t = r.throughput if r.ok else None
        dist = r.distribution
        known = r.error.explanations[0] if r.error and r.error.explanations else None  # the root cause first
        point = {"devices": n, "run_id": r.id, "status": r.status, "message": r.error.message if r.error else None,
                 "explained": {"cause": known.cause, "fix": known.fix} if known else None,
                 "batch_size": r.batch_size, "per_device_batch_size": r.per_device_batch_size,
                 "samples_per_s": r.samples_per_s if t else None,
                 "ci95": [t.ci95_low / r.units_per_sample, t.ci95_high / r.units_per_sample]
                 if t and t.ci95_low is not None else None,
                 "step_time_s": r.step_time_s if t else None,
                 "expected_efficiency": scaling.expected_efficiency(n, link), "link": link,
                 "speedup": None, "efficiency": None, "outside_compute_s": None, "outside_compute_share": None,
                 "allreduce_estimate_s": None, "input_wait_share": r.input_wait_share,
                 "all_reduce": dist.all_reduce if dist else None,
                 "batchnorm": r.batchnorm, "communication": communication.of(r),
                 "collectives": communication.as_compiled(dist.collectives if dist else None),
                 "per_gpu": _per_gpu(r), "flags": [f.code for f in r.flags],
                 "mfu": r.mfu, "peak_memory_bytes": r.peak_memory_bytes, "each_alone": None}
        params = dist.params if dist else None
        point["allreduce_estimate_s"] = scaling.allreduce_s(params, n, gbs) if device_kind == "gpu" else None
        if t and base_ok:
            ratio = scaling.speedup(r.samples_per_s, base.samples_per_s)
            low, high = ratio_ci(r.window_samples_per_s(), base.window_samples_per_s()) if n > 1 else (1.0, 1.0)
            point["speedup"] = {"ratio": ratio, "ci95_low": low, "ci95_high": high}
            point["efficiency"] = {"value": scaling.efficiency(ratio, n), "ci95_low": low / n, "ci95_high": high / n}
            point["outside_compute_s"], point["outside_compute_share"] = scaling.outside_compute(
                r.step_time_s, base.step_time_s, n, mode)
            point["each_alone"] = scaling.against_each_alone(r.samples_per_s, r.window_samples_per_s(),
                                                             list(gpu_ids[:n]), rates, ratio_ci)
            if point["each_alone"]:  # judged against what its GPUs do alone; outside compute from the slowest
                slowest = alone[point["each_alone"]["slowest_gpu"]]
                point["outside_compute_s"], point["outside_compute_share"] = scaling.outside_compute(
                    r.step_time_s, slowest.step_time_s, n, mode)
        straggler = next((f.message for f in r.flags if f.code == "straggler"), None)
        situation = scaling.Situation(
            devices=n, mode=mode, device_kind=device_kind,
            efficiency=judged(point), status=r.status,
            data=r.data.value, input_wait_share=r.input_wait_share, straggler=straggler,
            all_reduce=point["all_reduce"], backend=r.backend.value,
            interconnect=link,
            per_device_batch_size=r.per_device_batch_size, overhead_share=point["outside_compute_share"],
            allreduce_estimate_s=point["allreduce_estimate_s"], step_s=point["step_time_s"],
            batchnorm_layers=dist.batchnorm_layers if dist else None, outside_s=point["outside_compute_s"],
            batchnorm=point["batchnorm"], largest_batch=largest_batch)
        point["causes"] = [c.to_dict() for c in scaling.diagnose(situation)] if n > 1 else []
        point["meets_expectation"] = (None if judged(point) is None else
                                      judged(point) >= point["expected_efficiency"])
        points.append(point)
    batchnorm = next((p["batchnorm"] for p in points if p["batchnorm"]), None)
    return {"mode": mode, "backend": first.backend.value, "precision": first.precision.value, "data": first.data.value,
            "batchnorm": batchnorm,
            "device_kind": device_kind, "gpu": first.gpu.name if first.gpu else None,
            "interconnect": connection, "topology": [link.to_dict() for link in links],
            "points": points, "verdict": verdict(points, base_ok)}


def judged(point: dict) -> float | None:
    """The efficiency a count is judged by: against each of its GPUs alone where they were measured,
    else against the first GPU alone."""
    if point.get("each_alone"):
        return point["each_alone"]["value"]
    return point["efficiency"]["value"] if point["efficiency"] else None


def _per_gpu(record: RunRecord) -> list[dict]:
    per = record.telemetry_per_gpu or ([record.telemetry] if record.telemetry else [])
    return [{"index": t.index, "gpu_util_mean_pct": t.gpu_util_mean_pct, "power_mean_w": t.power_mean_w,
             "sm_clock_mean_mhz": t.sm_clock_mean_mhz, "temperature_max_c": t.temperature_max_c,
             "memory_used_max_bytes": t.memory_used_max_bytes} for t in per]


def verdict(points: list[dict], base_ok: bool) -> dict:
    """One sentence on the whole study, and what to try first."""
    hung = [p["devices"] for p in points if p["status"] == "timeout"]
    failed = [p for p in points if p["status"] not in ("ok", "timeout")]
    parts, tries = [], []
    if hung:
        parts.append(f"the {', '.join(map(str, hung))}-device run{'s' if len(hung) > 1 else ''} hung and "
                     "{} killed by the --timeout watchdog".format("were" if len(hung) > 1 else "was"))
        tries.append("rerun with NCCL_DEBUG=INFO to see the collective that waits; check the topology and "
                     "that no other job holds the GPUs")
    for p in failed:
        known = p.get("explained")
        parts.append(f"the {p['devices']}-device run ended {p['status']}: {p['message']}"
                     + (f" ({known['cause']})" if known else ""))
        if known and known["fix"] not in tries:
            tries.append(known["fix"])
    if not base_ok:
        parts.append("the 1-device run did not finish, so there is no speedup to report")
        return {"ok": False, "summary": "; ".join(parts), "try": tries}
    measured = [p for p in points if p["devices"] > 1 and p["efficiency"] is not None]
    if not measured:
        return {"ok": not parts, "summary": "; ".join(parts) or "only the 1-device run was asked for", "try": tries}
    below = [p for p in measured if not p["meets_expectation"]]
    for p in measured:
        e, each = p["efficiency"]["value"], p.get("each_alone")
        against = "" if not each else (
            f" against GPU 0 alone, {each['value']:.1%} against each GPU alone (the slowest, GPU "
            f"{each['slowest_gpu']}, runs at {each['slowest_vs_first']:.3f}x the first alone)")
        parts.append(f"{p['devices']} devices: {p['speedup']['ratio']:.2f}x, {e:.1%} efficiency{against} "
                     f"({'meets' if p['meets_expectation'] else 'below'} the {p['expected_efficiency']:.0%} expected"
                     + (f" over {p['link']})" if p.get("link") else ")"))
    for p in below:
        for cause in p["causes"]:
            if cause["try"] not in tries:
                tries.append(cause["try"])
    likely = below[-1]["causes"][0]["message"] if below and below[-1]["causes"] else None
    summary = "; ".join(parts) + (f". Likely cause: {likely}" if likely else "")
    exchanged = next((p["communication"] for p in measured if p.get("communication")), None)
    if exchanged:  # what these numbers were measured with: another setting is another study
        summary += f". Gradients: {exchanged}"
        compiled = measured[-1].get("collectives")  # the largest count's, as its program had them
        summary += f"; {compiled} ({measured[-1]['devices']} devices)" if compiled else ""
    return {"ok": not below and not hung and not failed, "summary": summary, "try": tries}


def run_worker(workload_name: str, options: ScaleOptions, cluster_id: str, nvml: Nvml, store: Store,
               progress: engine.Progress | None = None) -> RunRecord:
    """One host's worker of a multi-host run (TF_CONFIG in the environment): its record, stored
    under the cluster id for `results export --group` and `scale --merge`."""
    import os

    addresses, index = cluster.read_tf_config(os.environ.get("TF_CONFIG"))
    if len(options.counts) != 1:
        raise UsageError("a --worker uses one --gpus count: the GPUs of this host it trains on")
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
    record = record.model_copy(update={
        "cluster": ClusterTag(id=cluster_id, index=index, workers=len(addresses), address=addresses[index]),
        "scale": ScaleTag(session=cluster_id, mode=options.mode, devices=spec.devices, role="worker")})
    engine.keep(store, [record], progress)
    progress.run_finished(label, [record])
    return record


def merge(cluster_id: str, store: Store, pricing: PricingOptions = PricingOptions()) -> RunRecord:
    """The workers' records of a multi-host run (all in this store) merged into one, stored."""
    workers = [r for r in store.list(group=cluster_id, kind="benchmark") if r.cluster is not None and r.cluster.role != "merged"]
    if not workers:
        raise UsageError(f"no worker records of cluster {cluster_id!r} in {store.path}: import each host's "
                         f"`gpuscout results export --group {cluster_id}` first")
    merged = cluster.merge_records(workers, pricing)
    merged = merged.model_copy(update={"scale": ScaleTag(session=cluster_id, mode=workers[0].scale.mode
                                                         if workers[0].scale else None,
                                                         devices=merged.devices, role="merged")})
    store.put(merged)
    return merged
