"""What a profiler trace of a watched script's steps says each GPU did: its kernels' busy time a
step, the part of it in collectives (NCCL's kernels: data parallelism's gradient all-reduce),
and the part of that with no other kernel of the GPU running: communication the step waited
for, not hidden behind computation. NVML's busy share cannot tell these apart (an all-reduce
kernel keeps a GPU "busy" while it waits for the other GPU).

Read from jax's perfetto trace (the child asks jax for one beside its xplane, child/watch_state.py),
whose kernels sit on "Stream" threads of a "/device:GPU:N" process; a trace with no GPU (a CPU
run) gives none. TensorFlow writes an xplane only: measure/xplane.py reads its kernels into the
same list.
benchmarks/step_kernels.py reads the same traces kernel by kernel (and torch.profiler's).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from gpuscout.measure import xplane

# NCCL's kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ...) and XLA's own collective kernels,
# by their kernel or HLO op name
COLLECTIVE = re.compile(r"nccl|all_?reduce|all-reduce|all_?gather|reduce_?scatter|collective", re.I)
# A computing kernel is "beside" the collectives when at least this share of it ran while one did,
# "alone" when none of it did; its name needs this many alone to give its usual duration.
BESIDE_SHARE = 0.5
ALONE_NEEDED = 2
# a trace larger than this is not read (a long --trace-steps range of a big model): said, not parsed
MAX_TRACE_BYTES = 512 << 20


class TooLarge(Exception):
    pass


def within(path: Path, limit_bytes: int) -> None:
    """TooLarge where the trace file at `path` is over `limit_bytes`."""
    size = path.stat().st_size
    if size > limit_bytes:
        raise TooLarge(f"{size / 2**20:.0f} MiB, over {limit_bytes >> 20} MiB: fewer --trace-steps")


def load_trace(directory: Path) -> dict | None:
    """The perfetto/Chrome JSON trace under `directory` (jax writes perfetto_trace.json.gz)."""
    found = sorted(directory.rglob("*.json.gz")) or sorted(directory.rglob("*.trace.json"))
    if not found:
        return None
    within(found[0], MAX_TRACE_BYTES)
    opener = gzip.open if found[0].suffix == ".gz" else open
    with opener(found[0], "rt") as f:
        return json.load(f)


def device_kernels(trace: dict) -> list[dict]:
    """The GPU's kernels, copies and memsets of a Chrome-format trace: torch.profiler marks them
    with a category; jax's perfetto trace puts them on "Stream" threads of a /device:GPU process.
    Each: name, ts_us, dur_us, op (the HLO instruction or long name), device."""
    processes, threads = {}, {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "process_name":
            processes[e["pid"]] = str(e.get("args", {}).get("name", ""))
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e.get("tid"))] = str(e.get("args", {}).get("name", ""))
    kernels = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        torch_device = e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        jax_device = "GPU" in processes.get(e["pid"], "") and threads.get((e["pid"], e.get("tid")), "").startswith(
            "Stream"
        )
        if torch_device or jax_device:
            args = e.get("args") or {}
            kernels.append(
                {
                    "name": e["name"],
                    "ts_us": float(e["ts"]),
                    "dur_us": float(e["dur"]),
                    "op": str(args.get("hlo_op") or args.get("long_name") or "")[:200],
                    "device": processes.get(e["pid"], "") if jax_device else f"cuda:{args.get('device', 0)}",
                }
            )
    return kernels


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of (start, end) intervals as disjoint, sorted intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def covered(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> list[float]:
    """How much of each of `intervals` (sorted by start, may overlap) lies inside the disjoint
    sorted `cover`."""
    out, j = [], 0
    for start, end in intervals:
        while j < len(cover) and cover[j][1] <= start:
            j += 1
        inside, k = 0.0, j
        while k < len(cover) and cover[k][0] < end:
            inside += max(0.0, min(end, cover[k][1]) - max(start, cover[k][0]))
            k += 1
        out.append(inside)
    return out


def uncovered(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """How much of the disjoint sorted `intervals` lies outside the disjoint sorted `cover`."""
    return max(0.0, length(intervals) - sum(covered(intervals, cover)))  # never -0.0 from rounding


def slowed_beside(computing: list[dict], talking: list[tuple[float, float]]) -> float:
    """Microseconds the computing kernels that ran beside the collectives took beyond their usual
    duration: for each kernel name seen both beside and alone, the beside ones' durations less the
    median of the alone ones'. A collective holds SMs and memory bandwidth that the kernels beside
    it would use; cuBLAS's Hopper GEMMs, sized to one wave over every SM, then run part of their
    work as a second wave (GPT-2 small on four H200s: two such GEMMs 1.34-1.48x slower, 1.1 ms a
    step, against the same step with nothing exchanged; docs/benchmarks.md). A lower bound: a kernel
    that never runs alone is not counted (this read 1.03 ms a step there, where those two GEMMs took
    0.97 ms more than with nothing exchanged and all computing kernels 1.85); kernels of one name may
    differ in shape, which the median of several alone keeps in check."""
    ordered = sorted(computing, key=lambda k: k["ts_us"])
    inside = covered([(k["ts_us"], k["ts_us"] + k["dur_us"]) for k in ordered], talking)
    alone, beside = defaultdict(list), defaultdict(list)
    for k, shared in zip(ordered, inside):
        if shared == 0:
            alone[k["name"]].append(k["dur_us"])
        elif shared >= BESIDE_SHARE * k["dur_us"]:
            beside[k["name"]].append(k["dur_us"])
    total = 0.0
    for name, durations in beside.items():
        if len(alone[name]) >= ALONE_NEEDED:
            usual = statistics.median(alone[name])
            total += max(0.0, sum(d - usual for d in durations))
    return total


def is_collective(kernel: dict) -> bool:
    return bool(COLLECTIVE.search(kernel["name"]) or COLLECTIVE.search(kernel["op"]))


def per_device(kernels: list[dict], steps: int) -> list[dict]:
    """Each device's kernels, in ms a step: busy (the union of its kernels), collectives (the
    union of its collective kernels), collectives_alone (the part of those with no other kernel of
    the device running), slowed_beside_collectives (slowed_beside) and span (first kernel's start
    to last kernel's end)."""
    out = []
    for device in sorted({k["device"] for k in kernels}):
        mine = [k for k in kernels if k["device"] == device]
        spans = [(k["ts_us"], k["ts_us"] + k["dur_us"]) for k in mine]
        collective = [is_collective(k) for k in mine]
        talking = merged([s for s, c in zip(spans, collective) if c])
        computing = merged([s for s, c in zip(spans, collective) if not c])
        ms = lambda us: round(us / steps / 1000, 4)  # noqa: E731  (microseconds in the trace -> ms a step)
        out.append(
            {
                "device": device,
                "kernels_per_step": round(len(mine) / steps, 1),
                "busy_ms": ms(length(merged(spans))),
                "collectives_ms": ms(length(talking)),
                "collectives_alone_ms": ms(uncovered(talking, computing)),
                "slowed_beside_collectives_ms": ms(
                    slowed_beside([k for k, c in zip(mine, collective) if not c], talking)
                ),
                "span_ms": ms(max(e for _, e in spans) - min(s for s, _ in spans)),
            }
        )
    return out


def read(directory: Path, steps: int) -> tuple[list[dict], str | None]:
    """(per_device of the trace under `directory`, a note where it could not be read): jax's
    perfetto JSON, else the XSpace protobuf TensorFlow writes (measure/xplane.py). Never raises:
    the watched run's record is stored whatever the trace holds."""
    try:
        trace = load_trace(directory)
        if trace is not None:
            return per_device(device_kernels(trace), max(1, steps)), None
        found = xplane.find(directory)
        if found is None:
            return [], "no trace file to read the kernels from"
        within(found, xplane.MAX_XPLANE_BYTES)
        schema = xplane.schema()
        if schema is None:
            return [], xplane.NO_SCHEMA
        return per_device(xplane.device_kernels(found, schema), max(1, steps)), None
    except TooLarge as exc:
        return [], f"the trace's kernels were not read: {exc}"
    except Exception as exc:  # a truncated file, another tool's JSON: said, the record kept
        return [], f"the trace's kernels were not read ({type(exc).__name__}: {exc})"[:300]
