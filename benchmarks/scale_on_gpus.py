"""`gpuscout scale` on the lent multi-GPU machine (jax backend), with PyTorch DDP measured in the
same call as the peer, for docs/benchmarks.md.

    python benchmarks/scale_on_gpus.py --out OUTDIR [--parts resnet50_bf16,resnet50_bf16_global,...] [--budget-s 540]
        [--gpus 1,2] [--ddp eager,compiled]

Each part: `gpuscout scale WORKLOAD --gpu-counts COUNTS --backend jax` (weak scaling at the default batch
per GPU), and for the per-replica parts the DDP peer (benchmarks/ddp_peer.py) at each count with
the same per-GPU batch and precision, once per `--ddp` mode (eager; compiled: the model and its
loss compiled, then DDP, as nanoGPT does). Part costs are for 1,2 GPUs with the eager peer; more
counts and modes scale them. Writes OUTDIR/summary.json, the scale reports and logs, the
`nvidia-smi topo -m` matrix, and for a point that failed the run as stored (its error); prints a
short table last. A part that would not fit in what is left of --budget-s is skipped and listed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LHS = "--xla_gpu_enable_latency_hiding_scheduler=true"
# XLA's own default, which gpuscout's child turns off for jax over several GPUs (executor/local.py):
# all-reduces of up to a few MB as XLA's own one-shot Triton kernels, each ending before the next
# kernel starts (docs/benchmarks.md, "What two GPUs add").
ONE_SHOT_AR = "--xla_gpu_unsupported_use_all_reduce_one_shot_kernel=true"
# Smaller combined all-reduces, closer to DDP's 25 MB buckets, can start earlier in the backward pass
# (measured: 94.5% against 96.5%). Larger ones: bf16 ResNet-50's step holds 32 all-reduces, 23 with
# nothing beside them, where fp32's holds 4, all beside computation (docs/benchmarks.md, "Small
# all-reduces to NCCL"); measured on two H200s: 30 all-reduces, 96.0% against 96.4%.
COMBINE_4MIB = f"--xla_gpu_all_reduce_combine_threshold_bytes={4 * 2**20}"
COMBINE_128MIB = f"--xla_gpu_all_reduce_combine_threshold_bytes={128 * 2**20}"
# XLA's GPU scheduler keeps one collective in flight by default (debug_options_flags.cc sets
# xla_gpu_experimental_parallel_collective_overlap_limit to 1). GPT-2's head gradient is the first the
# backward pass computes (the head is the last layer), yet its all-reduce ran after the backward pass
# ("What two GPUs add"). The limit is read by the latency-hiding scheduler only, so the part turns
# that on too. It and the parts below were measured on two H200s, none a gain (docs/benchmarks.md,
# "Seven more settings on two H200s").
OVERLAP_2 = f"--xla_gpu_experimental_parallel_collective_overlap_limit=2 {LHS}"
# Each all-reduce started as soon as its operand is ready, not where the scheduler would put it.
EARLY_START = "--xla_gpu_experimental_collective_start_as_early_as_possible=true"
# NCCL on buffers registered with it (user buffers; symmetric ones, NCCL >= 2.27, reduce in place over
# NVLink with fewer SMs): less copying and fewer SMs taken from the kernels beside the all-reduce.
USER_BUFFERS = "--xla_gpu_enable_nccl_user_buffers=true"
SYMMETRIC_BUFFERS = "--xla_gpu_experimental_enable_nccl_symmetric_buffers=true"
# Collectives on more than one stream, so one waiting does not hold back the next.
MULTI_STREAM = "--xla_gpu_experimental_enable_collective_multi_streaming=true"
# XLA launches a step's kernels as CUDA graphs (command buffers), but by default not its
# collectives (debug_options_flags.cc: FUSION, CUBLAS, CUBLASLT, CUSTOM_CALL, CUDNN,
# DYNAMIC_SLICE_FUSION), so each all-reduce splits the graph (a two-GPU ResNet-50 step has ~600
# more kernels than one GPU's and ~1,200 gaps of a few microseconds between them). With them: slower.
COMMAND_BUFFER_COLLECTIVES = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION,COLLECTIVES"
)
# Fewer NCCL channels, fewer SMs taken from the computation NCCL runs beside: on two H100s GPT-2's
# matmuls ran 1.63 ms a step longer beside its asynchronous all-reduces at the same clocks
# (docs/benchmarks.md, "What two GPUs add"). NCCL_MAX_NCHANNELS: docs.nvidia.com/deeplearning/nccl,
# "Environment Variables".
FEW_CHANNELS = {"NCCL_MAX_NCHANNELS": "8"}
# NCCL's protocol forced (its tuner's choice otherwise): GPT-2's 4-GPU trace shows its all-reduce
# kernel as ncclDevKernel_AllReduce_Sum_f32_RING_LL, named for the low-latency protocol; Simple and
# LL128 move more bytes per SM cycle (NCCL_PROTO: "Environment Variables"). Forcing either moved
# nothing on 4 H200s (89.4% and 89.0% against 89.1%; docs/benchmarks.md, 2026-11-27).
SIMPLE_PROTOCOL = {"NCCL_PROTO": "Simple"}
LL128_PROTOCOL = {"NCCL_PROTO": "LL128"}
# (workload, precision, batch-norm statistics, seconds it takes at 1,2 GPUs with the peer, XLA_FLAGS
# or an environment). A part with settings measures them against its part without; the DDP peer runs
# with the latter only.
PARTS = {
    "resnet50_fp32": ("resnet50", "fp32", "per-replica", 160, ""),
    "resnet50_bf16": ("resnet50", "mixed_bfloat16", "per-replica", 150, ""),
    # Keras' DataParallel: statistics over the global batch (the DDP peer runs with the per-replica part)
    "resnet50_fp32_global": ("resnet50", "fp32", "global", 110, ""),
    "resnet50_bf16_global": ("resnet50", "mixed_bfloat16", "global", 100, ""),
    "gpt2_small": ("gpt2_small", "mixed_bfloat16", "per-replica", 200, ""),
    "gpt2_small_fp32": ("gpt2_small", "fp32", "per-replica", 150, ""),
    "bert_base": ("bert_base", "mixed_bfloat16", "per-replica", 200, ""),
    # with XLA's latency-hiding scheduler on, as NVIDIA's JAX containers set it (GPT-2's embedding and
    # head gradients, 295 MiB, are all-reduced after the backward pass by default)
    "resnet50_bf16_lhs": ("resnet50", "mixed_bfloat16", "per-replica", 130, LHS),
    "gpt2_small_lhs": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, LHS),
    "resnet50_bf16_one_shot": ("resnet50", "mixed_bfloat16", "per-replica", 130, ONE_SHOT_AR),
    "gpt2_small_one_shot": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, ONE_SHOT_AR),
    "resnet50_bf16_combine_4mib": ("resnet50", "mixed_bfloat16", "per-replica", 130, COMBINE_4MIB),
    "resnet50_bf16_combine_128mib": ("resnet50", "mixed_bfloat16", "per-replica", 130, COMBINE_128MIB),
    "resnet50_bf16_overlap_2": ("resnet50", "mixed_bfloat16", "per-replica", 130, OVERLAP_2),
    "gpt2_small_overlap_2": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, OVERLAP_2),
    "gpt2_small_few_channels": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, FEW_CHANNELS),
    "gpt2_small_simple": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, SIMPLE_PROTOCOL),
    "gpt2_small_ll128": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, LL128_PROTOCOL),
    "resnet50_bf16_early": ("resnet50", "mixed_bfloat16", "per-replica", 130, EARLY_START),
    "resnet50_bf16_user_buffers": ("resnet50", "mixed_bfloat16", "per-replica", 130, USER_BUFFERS),
    "gpt2_small_early": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, EARLY_START),
    "gpt2_small_user_buffers": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, USER_BUFFERS),
    "gpt2_small_symmetric": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, SYMMETRIC_BUFFERS),
    "gpt2_small_multi_stream": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, MULTI_STREAM),
    "resnet50_bf16_graphs": ("resnet50", "mixed_bfloat16", "per-replica", 130, COMMAND_BUFFER_COLLECTIVES),
    "gpt2_small_graphs": ("gpt2_small", "mixed_bfloat16", "per-replica", 150, COMMAND_BUFFER_COLLECTIVES),
}
# Compiled programs are shared between parts (the one-GPU point of a global part is the
# per-replica part's): compilation is not what is measured here.
CACHE = {"JAX_COMPILATION_CACHE_DIR": "/tmp/gpuscout-jax-cache", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def run(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
    return result


def peer(
    workload: str, gpus: int, batch: int, precision: str, mode: str, out: Path, on_gpu: int | None = None
) -> dict | None:
    """The DDP peer over the first `gpus` GPUs, or alone on GPU `on_gpu` (its per-GPU baseline)."""
    env = None if on_gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": str(on_gpu)}
    name = f"ddp_{workload}_{precision}_{mode}_{gpus}" + (f"_gpu{on_gpu}" if on_gpu is not None else "")
    result = run(
        [sys.executable, "benchmarks/ddp_peer.py", str(gpus), str(batch), precision, workload, "--mode", mode],
        out / f"{name}.log",
        300,
        env,
    )
    line = next((printed for printed in result.stdout.splitlines() if printed.startswith("@@peer ")), None)
    return json.loads(line[len("@@peer ") :]) if line else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--ddp", default="eager", help="DDP peer modes, comma-separated: eager, compiled")
    args = parser.parse_args()
    modes = [m for m in args.ddp.split(",") if m]
    counts = [int(c) for c in args.gpus.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
    (args.out / "topo.txt").write_text(topo.stdout + topo.stderr)
    summary: dict = {"topo": topo.stdout, "parts": {}, "skipped": []}
    for name in args.parts.split(","):
        workload, precision, batchnorm, cost_s, settings = PARTS[name]
        settings = settings if isinstance(settings, dict) else {"XLA_FLAGS": settings} if settings else {}
        cost_s = cost_s * len(counts) / 2 * (1 + 0.5 * (len(modes) - 1))  # a compiled peer: about half more
        if time.monotonic() - started + cost_s > args.budget_s:
            summary["skipped"].append(name)
            continue
        store = args.out / "results.sqlite"
        env = {**os.environ, **CACHE, **settings}
        result = run(
            [
                sys.executable,
                "-m",
                "gpuscout",
                "scale",
                workload,
                "--gpu-counts",
                args.gpus,
                "--backend",
                "jax",
                "--precision",
                precision,
                "--batchnorm",
                batchnorm,
                "--json",
                "--store",
                str(store),
            ],
            args.out / f"scale_{name}.log",
            600,
            env,
        )
        part = {"returncode": result.returncode, "settings": settings}
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError:
            report = None
        if report:
            (args.out / f"scale_{name}.json").write_text(json.dumps(report, indent=2))
            part.update(
                {
                    "interconnect": report["interconnect"],
                    "verdict": report["verdict"]["summary"],
                    "points": [
                        {
                            k: p.get(k)
                            for k in (
                                "devices",
                                "status",
                                "per_device_batch_size",
                                "samples_per_s",
                                "speedup",
                                "efficiency",
                                "each_alone",
                                "outside_compute_s",
                                "outside_compute_share",
                                "allreduce_estimate_s",
                                "per_gpu",
                                "flags",
                                "mfu",
                                "run_id",
                            )
                        }
                        for p in report["points"]
                    ],
                }
            )
        for point in (report or {}).get("points", []):
            if point["status"] != "ok" and point.get("run_id"):  # the worker's error is in the store
                run(
                    [sys.executable, "-m", "gpuscout", "results", "show", point["run_id"], "--store", str(store)],
                    args.out / f"failed_{name}_{point['devices']}.log",
                    60,
                )
        if report and batchnorm == "per-replica" and not settings:
            batch = report["points"][0]["per_device_batch_size"]
            torch_precision = "bf16" if precision == "mixed_bfloat16" else "fp32"
            part["ddp_peer"] = {
                mode: {str(n): peer(workload, n, batch, torch_precision, mode, args.out) for n in counts}
                for mode in modes
            }
            for mode in modes:  # the peer's own per-GPU baseline: each other GPU of the largest count alone
                for g in range(1, max(counts)):
                    part["ddp_peer"][mode][f"1@gpu{g}"] = peer(workload, 1, batch, torch_precision, mode, args.out, g)
        summary["parts"][name] = part
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(topo.stdout)
    # eff: against GPU 0 alone; each: against each GPU of the count alone (the slowest sets the pace)
    print(
        f"{'part':16} {'GPUs':>4} {'samples/s':>10} {'speedup':>8} {'eff':>6} {'each':>6} {'outside':>8}"
        + "".join(f" {m[:8] + ' s/s':>13} {'eff':>6} {'each':>6}" for m in modes)
    )
    for name, part in summary["parts"].items():
        ddp = part.get("ddp_peer") or {}
        for p in part.get("points", []):
            peers = ""
            for mode in modes:
                runs = ddp.get(mode) or {}
                d, d1 = (runs.get(k) or {} for k in (str(p["devices"]), "1"))
                ddp_eff = (d["samples_per_s"] / (p["devices"] * d1["samples_per_s"])) if d and d1 else 0
                alone = [d1] + [runs.get(f"1@gpu{g}") or {} for g in range(1, p["devices"])]
                slowest = min((a.get("samples_per_s") or 0 for a in alone), default=0)
                ddp_each = d["samples_per_s"] / (p["devices"] * slowest) if d and slowest else 0
                peers += f" {d.get('samples_per_s', 0):>13.1f} {ddp_eff:>6.3f} {ddp_each:>6.3f}"
            print(
                f"{name:16} {p['devices']:>4} {p['samples_per_s'] or 0:>10.1f} "
                f"{(p['speedup'] or {}).get('ratio', 0):>8.3f} {(p['efficiency'] or {}).get('value', 0):>6.3f} "
                f"{(p.get('each_alone') or {}).get('value', 0):>6.3f} "
                f"{(p['outside_compute_share'] or 0):>8.3f}" + peers
            )
            if p.get("each_alone"):
                print(f"{'':16} each GPU alone: {p['each_alone']['alone_samples_per_s']} samples/s")
    print("skipped:", summary["skipped"], "elapsed", round(time.monotonic() - started), "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
