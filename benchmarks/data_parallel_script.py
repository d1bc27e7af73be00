"""A user's script on every GPU of the host, by hand and through gpuscout (issue 48), in one call:

1. by hand, ABAB: benchmarks/user_input/dp_train.py `one` (every GPU visible, fit on one), `one`
   under `gpuscout watch` (the instrumentation's cost in the script's own clock), and for each
   count N of --gpus, `spread` (DataParallel written in, the same global batch) and `spread_batch`
   (the global batch x N) on the first N GPUs, each timed by its own callback, ROUNDS rounds in turn;
2. for each N, `gpuscout tune --only data_parallel` of the unchanged `one` script on the first N
   GPUs: the injected changes' speed-ups with their CIs, against the hand-written ones' (the same
   windows test, analysis/compare);
3. `gpuscout watch` of `one` (the verdict on GPUs left idle) and of `spread` on every GPU (what
   watch reads of a spread step: replicas, per-device batch, each GPU's busy share);
4. `anatomy` (not by default): `one` by hand, with the instrumentation alone (watch's sitecustomize on
   its PYTHONPATH, no gpuscout process above it) and watched, each tracing 10 of its steps with jax's
   profiler: each Python function's time a step on the main thread, the GPU's busy time and gaps, to
   tell where the instrumentation's cost on a host-fed loop goes. `--instrumented` adds the
   instrumentation alone to part 1's modes (the child's cost apart from the watching process's).

    PYTHONPATH=src python benchmarks/data_parallel_script.py --out OUT [--rounds 3] [--steps 200] [--shape heavy]
        [--gpus 2,4] [--parts hand,tune,watch,anatomy] [--fake-nvml] [--instrumented]

Writes every report and log to OUT and OUT/summary.json; prints the summary and a short table last.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "user_input" / "dp_train.py"
ENV = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}


def visible(count: int | None) -> dict:
    """The environment with the first `count` GPUs visible (None: all of them)."""
    return ENV if count is None else {**ENV, "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(count)))}


# A GPU for gpuscout's fake NVML (telemetry/fake.py): watch's sampler then makes no driver calls,
# which tells the child's instrumentation's cost from that of NVML's queries beside the training
FAKE_GPU = {
    "driver_version": "580.0",
    "cuda_driver_version": 13000,
    "gpus": [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-fake",
            "memory_total_bytes": 85899345920,
            "compute_capability": [9, 0],
            "power_limit_w": 700,
            "sm_clock_max_mhz": 1980,
            "sm_clock_mhz": 1980,
            "utilization_pct": 90,
            "power_w": 500,
            "temperature_c": 60,
            "memory_used_bytes": 2 << 30,
            "clock_event_reasons": 0,
            "processes": [],
        }
    ],
}


def by_hand(
    mode: str,
    shape: str,
    out: Path,
    name: str,
    count: int | None = None,
    watched: str | None = None,
    fake_nvml: bool = False,
    instrumented: bool = False,
    trace_dir: Path | None = None,
) -> dict:
    """One run of the script, its own windows; `watched`: under `gpuscout watch --store watched`,
    which passes the script's stdout to stderr (its stdout is the JSON record); `fake_nvml`: with
    the watch's NVML a fake one (FAKE_GPU); `instrumented`: watch's sitecustomize on its PYTHONPATH
    and no gpuscout process (the child's instrumentation, sending nowhere); `trace_dir`: the script
    traces 10 of its steps there."""
    from gpuscout.measure.command import Instrumentation

    argv = [sys.executable, str(SCRIPT), mode, shape]
    env = visible(count)
    if watched:
        argv = [sys.executable, "-m", "gpuscout", "watch", "--json", "--store", watched, "--", *argv]
    if fake_nvml:
        (out / "fake_nvml.json").write_text(json.dumps(FAKE_GPU))
        env = {**env, "GPUSCOUT_FAKE_NVML": str(out / "fake_nvml.json")}
    if trace_dir is not None:
        env = {**env, "DP_TRACE_DIR": str(trace_dir)}
    with Instrumentation() if instrumented else contextlib.nullcontext() as instrumentation:
        if instrumented:
            env = instrumentation.env(env, {})
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    (out / f"{name}.log").write_text(done.stdout[-20_000:] + done.stderr[-50_000:])
    said = done.stderr if watched else done.stdout
    line = next((printed for printed in reversed(said.splitlines()) if printed.startswith('{"mode"')), None)
    if line is None:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(line)


def anatomy(trace_dir: Path, steps: int = 10, top: int = 45) -> dict:
    """What a trace of `steps` steps (dp_train.py's) says a step spent: the GPU's busy time and its
    idle gaps, and each Python function of the main thread, inclusive and self time (the time no
    traced call inside it took), per step, the largest `top` by inclusive time."""
    from gpuscout.measure import trace_kernels

    trace = trace_kernels.load_trace(trace_dir)
    threads = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    busy = trace_kernels.merged([(k["ts_us"], k["ts_us"] + k["dur_us"]) for k in trace_kernels.device_kernels(trace)])
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:])]
    python = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e and e["name"].startswith("$")]
    # the main thread: the one with the most Python calls (its name is the process's, not always "python")
    main = max(collections.Counter((e["pid"], e.get("tid")) for e in python).items(), key=lambda kv: kv[1])[0]
    calls = sorted(
        (e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e and (e["pid"], e.get("tid")) == main),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    inclusive, own, count, stack = {}, {}, {}, []
    for e in calls:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:  # a call inside the one on top of the stack: not that one's own time
            own[stack[-1]["name"]] -= e["dur"]
        name = e["name"]
        e["depth"] = len(stack)
        inclusive[name] = inclusive.get(name, 0.0) + e["dur"]
        own[name] = own.get(name, 0.0) + e["dur"]
        count[name] = count.get(name, 0) + 1
        stack.append(e)
    span = (busy[-1][1] - busy[0][0]) if busy else 0.0
    # one step from end to end of the script's own callback (its 5th to 6th traced call): the main
    # thread's calls four deep from the shallowest, and the GPU's busy stretches, in ms from its start
    marks = [e for e in calls if e["name"].startswith("$dp_train.py") and e["name"].endswith("on_train_batch_end")]
    timeline = {}
    if len(marks) > 6:
        start, end = marks[5]["ts"], marks[6]["ts"]
        at = lambda us: round((us - start) / 1000, 3)  # noqa: E731
        inside = [e for e in calls if start <= e["ts"] < end]
        top_depth = min(e["depth"] for e in inside)  # the trace may hold the frames fit runs in, or not
        timeline = {
            "host": [
                (at(e["ts"]), round(e["dur"] / 1000, 3), e["name"][:90])
                for e in inside
                if e["depth"] <= top_depth + 4 and e["dur"] >= 20
            ],
            "gpu_busy": [(at(a), round((b - a) / 1000, 3)) for a, b in busy if b > start and a < end],
        }
    ms = lambda us: round(us / 1000 / steps, 4)  # noqa: E731
    return {
        "main_thread": threads.get(main),
        "gpu_span_ms_per_step": ms(span),
        "gpu_busy_ms_per_step": ms(trace_kernels.length(busy)),
        "gpu_gaps_over_100us_per_step": round(sum(g > 100 for g in gaps) / steps, 2),
        "gpu_gap_ms_per_step_over_100us": ms(sum(g for g in gaps if g > 100)),
        "python": [
            {"name": n, "inclusive_ms": ms(inclusive[n]), "own_ms": ms(own[n]), "calls": count[n] / steps}
            for n in sorted(inclusive, key=inclusive.get, reverse=True)[:top]
        ],
        "one_step": timeline,
    }


def gpuscout(*args: str, out: Path, name: str, count: int | None = None) -> dict:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=visible(count), timeout=560
    )
    (out / f"{name}.stderr.txt").write_text(done.stderr[-200_000:])
    (out / f"{name}.json").write_text(done.stdout)
    print(f"{name}: exit {done.returncode}, {time.monotonic() - started:.0f} s", flush=True)
    return json.loads(done.stdout)


def main() -> None:
    from gpuscout.analysis.compare import contrast

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", default="200")
    parser.add_argument("--parts", default="hand,tune,watch")
    parser.add_argument("--shape", default="light", choices=("light", "heavy", "tiny"))
    parser.add_argument(
        "--fake-nvml",
        action="store_true",
        help="also `one` watched with a fake NVML: the instrumentation's cost without NVML's",
    )
    parser.add_argument(
        "--instrumented",
        action="store_true",
        help="also `one` with the instrumentation alone: the child's cost without the watching process",
    )
    parser.add_argument(
        "--gpus",
        default="",
        help="counts of GPUs to spread over (default: all of them; 1: none, only the script by hand and watched)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = str(args.out / "results.sqlite")
    parts = args.parts.split(",")
    counts = [int(c) for c in args.gpus.split(",") if c] or [None]
    summary: dict = {}

    def save() -> None:  # after each part: a call cut short keeps what it measured
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))

    if "hand" in parts:
        modes = (
            [("one", None, None), ("one_watched", None, store)]
            + [("one_watched_fake_nvml", None, store)] * args.fake_nvml
            + [("one_instrumented", None, None)] * args.instrumented
            + [(f"{m}@{n or 'all'}", n, None) for n in counts if n != 1 for m in ("spread", "spread_batch")]
        )
        windows: dict[str, list] = {name: [] for name, _, _ in modes}
        for r in range(args.rounds):
            for name, count, watched in modes:
                script_mode = (
                    name.split("@")[0].removesuffix("_fake_nvml").removesuffix("_watched").removesuffix("_instrumented")
                )
                result = by_hand(
                    script_mode,
                    args.shape,
                    args.out,
                    f"hand-{name}-{r}",
                    count,
                    watched,
                    fake_nvml=name.endswith("_fake_nvml"),
                    instrumented=name.endswith("_instrumented"),
                )
                windows[name] += result["window_samples_per_s"]
                summary.setdefault("devices", {})[name] = result["devices"]
                print(
                    f"hand {name} {r}: {statistics.median(result['window_samples_per_s']):,.0f} samples/s", flush=True
                )
            summary["hand"] = {m: {"median": statistics.median(w), "windows": w} for m, w in windows.items() if w}
            for name in summary["hand"]:
                if name != "one":
                    c = contrast(windows[name], windows["one"])
                    summary["hand"][name].update(ratio=c.ratio, ratio_low=c.ratio_low, ratio_high=c.ratio_high)
            save()
    if "tune" in parts:
        for count in sorted(counts, key=lambda c: -(c or 99)):
            report = gpuscout(
                "tune",
                "--json",
                "--only",
                "data_parallel",
                "--steps",
                args.steps,
                "--store",
                store,
                "--",
                sys.executable,
                str(SCRIPT),
                "one",
                args.shape,
                out=args.out,
                name=f"tune-{count or 'all'}",
                count=count,
            )
            summary[f"tune@{count or 'all'}"] = {
                r["change"]: {
                    k: r.get(k)
                    for k in (
                        "ratio",
                        "ratio_low",
                        "ratio_high",
                        "verdict",
                        "efficiency",
                        "devices",
                        "samples_per_s",
                        "healthy",
                    )
                }
                for r in report["rows"]
                if r["round"] == 1
            } | {"wall_s": report.get("wall_s")}
            save()
    if "watch" in parts:
        for mode in ("one", "spread"):
            record = gpuscout(
                "watch",
                "--json",
                "--steps",
                args.steps,
                "--store",
                store,
                "--",
                sys.executable,
                str(SCRIPT),
                mode,
                args.shape,
                out=args.out,
                name=f"watch-{mode}",
            )["runs"][0]
            main_fit = max(record["fits"], key=lambda f: f["steps"])
            summary[f"watch_{mode}"] = {
                "samples_per_s": record["samples_per_s"],
                "replicas": main_fit["replicas"],
                "devices": main_fit["devices"],
                "strategy": main_fit["strategy"],
                "batch": main_fit["batch_size"],
                "busy_per_gpu": [t["gpu_util_mean_pct"] for t in record.get("telemetry_per_gpu") or []],
                "verdict": [(c["code"], c["saving_share"]) for c in record["verdict"]],
            }
    if "anatomy" in parts:
        for name, watched, instrumented in (
            ("plain", None, False),
            ("instrumented", None, True),
            ("watched", store, False),
        ):
            trace_dir = args.out / f"trace-{name}"
            result = by_hand(
                "one",
                args.shape,
                args.out,
                f"anatomy-{name}",
                None,
                watched,
                instrumented=instrumented,
                trace_dir=trace_dir,
            )
            rate = statistics.median(result["window_samples_per_s"])
            summary.setdefault("anatomy", {})[name] = {"samples_per_s": rate, **anatomy(trace_dir)}
            shutil.rmtree(trace_dir, ignore_errors=True)  # megabytes a run: the summary is what comes back
            save()
    save()
    print(json.dumps({k: v for k, v in summary.items() if k not in ("hand", "anatomy")}))
    for mode, h in summary.get("hand", {}).items():
        extra = f" {h['ratio']:.3f}x [{h['ratio_low']:.3f}-{h['ratio_high']:.3f}]" if "ratio" in h else ""
        print(f"hand {mode}: {h['median']:,.0f} samples/s{extra}")
    for change, row in (
        (f"{key} {c}", r) for key, rows in summary.items() if key.startswith("tune@") for c, r in rows.items()
    ):
        if isinstance(row, dict) and row.get("ratio"):
            print(
                f"{change}: {row['samples_per_s']:,.0f} samples/s {row['ratio']:.3f}x "
                f"[{row['ratio_low']:.3f}-{row['ratio_high']:.3f}] {row['verdict']}, efficiency {row['efficiency']:.1%}"
            )


if __name__ == "__main__":
    main()
