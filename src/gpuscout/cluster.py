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

import copy
import json
import shlex
import socket
import threading
import uuid

from gpuscout import bench as bench_lib
from gpuscout import catalog, workloads
from gpuscout.analysis import flags as flagging
from gpuscout.analysis.mfu import achieved_tflops
from gpuscout.analysis.stats import summarize
from gpuscout.analysis.telemetry import combine_telemetry
from gpuscout.errors import UsageError
from gpuscout.executor.local import child_env
from gpuscout.pricing import PricingOptions
from gpuscout.provenance import utc_now
from gpuscout.spec import RunSpec


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
        raise UsageError(f"TF_CONFIG is not a worker cluster config ({type(exc).__name__}: {exc}); expected "
                         '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": N}}') from None
    if task.get("type") != "worker" or not 0 <= index < len(workers):
        raise UsageError(f"TF_CONFIG's task must be a worker with an index below {len(workers)}, got {task}")
    return workers, index


def check_hosts(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    bad = [h for h in hosts if h.count(":") != 1 or not h.split(":")[1].isdigit() or not h.split(":")[0]]
    if len(hosts) < 2 or bad:
        raise UsageError(f"--hosts takes two or more host:port pairs like a:2222,b:2222, got {text!r}"
                         + (f" ({bad[0]!r} is not host:port)" if bad else ""))
    return hosts


def commands(workload: str, hosts: list[str], worker_args: list[str]) -> dict:
    """What each host runs, and how the records come together afterwards."""
    cluster_id = uuid.uuid4().hex[:8]
    args = " ".join(shlex.quote(a) for a in worker_args)
    per_host = [{"host": h.split(":")[0], "command":
                 f"TF_CONFIG={shlex.quote(tf_config(hosts, i))} gpuscout scale {shlex.quote(workload)} --worker "
                 f"--cluster {cluster_id}" + (f" {args}" if args else "")} for i, h in enumerate(hosts)]
    merge = [f"gpuscout results export --group {cluster_id} -o {cluster_id}-worker{i}.json   # on {p['host']}"
             for i, p in enumerate(per_host) if i]
    merge += [f"gpuscout results import {cluster_id}-worker{i}.json   # on {per_host[0]['host']}"
              for i in range(1, len(per_host))]
    merge.append(f"gpuscout scale --merge {cluster_id}   # on {per_host[0]['host']}")
    return {"cluster": cluster_id, "workers": per_host, "then": merge}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_local_workers(spec: RunSpec, gpu_ids: list[int | None], options: bench_lib.BenchOptions, nvml,
                      host: dict, group_id: str, on_event=lambda event: None) -> list[dict]:
    """len(gpu_ids) workers of one MultiWorkerMirroredStrategy run on this host, one device each
    (a GPU, or the CPU for None); their records, worker 0 first. If one fails, the others are
    stopped: they would wait for it in the next collective until the timeout."""
    addresses = [f"localhost:{_free_port()}" for _ in gpu_ids]
    cluster_id = uuid.uuid4().hex[:8]
    records: list[dict | None] = [None] * len(gpu_ids)
    failed = threading.Event()

    def work(index: int) -> None:
        mine = spec.model_copy(update={"gpu_index": gpu_ids[index],
                                       "gpu_indices": None if gpu_ids[index] is None else (gpu_ids[index],)})
        env = {**child_env(mine), "TF_CONFIG": tf_config(addresses, index)}
        record = bench_lib.measure_one(mine, options, nvml, host, group_id, 0, env=env, cancel=failed,
                                       on_event=on_event if index == 0 else lambda event: None)
        record["cluster"] = {"id": cluster_id, "index": index, "workers": len(gpu_ids), "address": addresses[index]}
        records[index] = record
        if record["status"] != "ok":
            failed.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(gpu_ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def merge_records(workers: list[dict], pricing: PricingOptions = PricingOptions()) -> dict:
    """One record for a multi-worker run from its workers' records (see the module's docstring)."""
    workers = sorted(workers, key=lambda r: r["cluster"]["index"])
    indices = [r["cluster"]["index"] for r in workers]
    expected = workers[0]["cluster"]["workers"]
    if indices != list(range(expected)):
        raise UsageError(f"cluster {workers[0]['cluster']['id']}: have the records of workers {indices}, need "
                         f"all of 0..{expected - 1}: import the missing hosts' exports first")
    first = workers[0]
    merged = copy.deepcopy(first)
    merged.update({
        "id": uuid.uuid4().hex[:12], "created_utc": utc_now(),
        "devices": sum(r["devices"] for r in workers), "batch_size": sum(r["batch_size"] for r in workers),
        "gpus": [g for r in workers for g in (r.get("gpus") or ([r["gpu"]] if r.get("gpu") else []))] or None,
    })
    merged["distribution"] = {**(first.get("distribution") or {}), "workers": expected,
                              "replicas": merged["devices"], "worker_run_ids": [r["id"] for r in workers],
                              "addresses": [r["cluster"].get("address") for r in workers]}
    merged["cluster"] = {**first["cluster"], "index": None, "role": "merged"}
    broken = [r for r in workers if r["status"] != "ok"]
    if broken:
        # The first failure is the cause; the others were stopped because of it.
        cause = min(broken, key=lambda r: r["error"]["message"].startswith("stopped:"))
        merged.update({"status": cause["status"], "error": {**cause["error"], "message":
                       f"worker {cause['cluster']['index']}: {cause['error']['message']}"}})
        return merged
    counts = {len(r["windows"]) for r in workers}
    if len(counts) != 1:
        raise UsageError(f"cluster {first['cluster']['id']}: workers timed different numbers of windows {sorted(counts)}")
    units = first["throughput"]["median"] / first["samples_per_s"]  # tokens per sample, or 1
    windows = []
    for parts in zip(*(r["windows"] for r in workers)):
        samples = sum(w["samples"] for w in parts)
        rate = sum(w["throughput"] for w in parts)  # units/s of each worker, summed
        seconds = samples * units / rate
        windows.append({"index": parts[0]["index"], "start_monotonic_s": parts[0]["start_monotonic_s"],
                        "end_monotonic_s": parts[0]["start_monotonic_s"] + seconds, "steps": parts[0]["steps"],
                        "samples": samples, "input_wait_s": max(w["input_wait_s"] for w in parts),
                        "seconds": seconds, "throughput": rate})
    summary = summarize([w["throughput"] for w in windows])
    samples_per_s = summary.median / units
    workload = workloads.get(first["workload"]) if first["spec"].get("model") is None else None
    achieved = achieved_tflops(first["training_flops_per_sample"], samples_per_s)
    peak = first["mfu_peak_tflops"] / first["devices"] * merged["devices"] if first.get("mfu_peak_tflops") else None
    merged.update({
        "windows": windows, "throughput": {**summary.to_dict(), "unit": first["unit"]},
        "samples_per_s": samples_per_s, "step_time_s": merged["batch_size"] / samples_per_s,
        "epoch_time_s": (workload.reference_dataset_size / summary.median
                         if workload is not None and workload.reference_dataset_size else None),
        "input_wait_share": max((r["input_wait_share"] for r in workers if r["input_wait_share"] is not None),
                                default=None),
        "peak_memory_bytes": max((r["peak_memory_bytes"] for r in workers if r["peak_memory_bytes"]), default=None),
        "achieved_tflops": achieved, "mfu_peak_tflops": peak, "mfu": achieved / peak if peak else None,
        "loss": first["loss"],
    })
    per_gpu = [{**t, "index": f"{r['cluster']['index']}:{t['index']}"} for r in workers
               for t in (r.get("telemetry_per_gpu") or ([{"index": (r.get("gpu") or {}).get("index"), **r["telemetry"]}]
                                                       if r.get("telemetry") else []))]
    merged["telemetry"] = combine_telemetry(per_gpu) if per_gpu else None
    merged["telemetry_per_gpu"] = per_gpu or None
    flags = {f["code"]: f for r in workers for f in r["flags"] if f["code"] not in ("high_variance", "slow_first_window")}
    for flag in flagging.variance_flags([w["throughput"] for w in windows], summary.cv):
        flags[flag.code] = flag.to_dict()
    straggler = flagging.straggler_flag(per_gpu)
    if straggler:
        flags["straggler"] = straggler.to_dict()
    merged["flags"] = list(flags.values())
    merged["cost"] = None
    entry = catalog.match(first["gpu"]["name"]) if first.get("gpu") else None
    if entry is not None and workload is not None:
        bench_lib.add_cost(merged, entry, workload, pricing)
    return merged
