"""Inference latency and throughput: gpuscout's compiled Keras path (jax, mixed_bfloat16) next to
PyTorch eager and torch.compile (bf16 autocast) and ONNX Runtime (CUDA, fp16) where it runs, on
the same GPU in one call, for docs/benchmarks.md.

    python benchmarks/inference_vs_torch.py --out OUTDIR [--models resnet50,bert_base] [--budget-s 540] [--gpu N]

Every request is timed the same way on every side: the input batch is copied from host memory
to the GPU, the forward pass runs, the GPU is synchronised; outputs stay on the GPU. 20 warm-up
requests (the first compiles), then 100 timed ones per batch size (1, 8, 64, 256). Peers run in
their own processes; ResNet-50 is torchvision's (channels_last), BERT-base Hugging Face's
BertForMaskedLM with SDPA attention at sequence length 128, like gpuscout's workloads.
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
BATCHES = (1, 8, 64, 256)
WARMUP, REQUESTS = 20, 100

PEER = r"""
import json, sys, time, statistics
import numpy as np, torch
name, mode, batches = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")]
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
if name == "resnet50":
    import torchvision
    model = torchvision.models.resnet50().cuda().eval().to(memory_format=torch.channels_last)
    make = lambda b: np.random.default_rng(0).standard_normal((b, 3, 224, 224), dtype=np.float32)
    to_gpu = lambda x: torch.from_numpy(x).cuda().to(memory_format=torch.channels_last)
    call = lambda m, x: m(x)
else:
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM._from_config(config, attn_implementation="sdpa").cuda().eval()
    make = lambda b: np.random.default_rng(0).integers(0, config.vocab_size, (b, 128), dtype=np.int64)
    to_gpu = lambda x: torch.from_numpy(x).cuda()
    call = lambda m, x: m(input_ids=x).logits
if mode == "compiled":
    model = torch.compile(model, dynamic=False)
out = {}
for b in batches:
    x = make(b)
    lat = []
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        for i in range(20 + 100):
            t = time.monotonic()
            call(model, to_gpu(x))
            torch.cuda.synchronize()
            if i >= 20:
                lat.append(time.monotonic() - t)
    lat.sort()
    pct = lambda p: lat[max(0, -(-p * len(lat) // 100) - 1)] * 1000
    out[b] = {"p50_ms": pct(50), "p99_ms": pct(99), "samples_per_s": b * len(lat) / sum(lat)}
print("@@peer " + json.dumps({"name": name, "mode": mode, "torch": torch.__version__, "batches": out}), flush=True)
"""

ORT = r"""
import json, sys, time
import numpy as np, torch, onnxruntime as ort
name, path, batches = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")]
if "CUDAExecutionProvider" not in ort.get_available_providers():
    print("@@peer " + json.dumps({"name": name, "mode": "onnxruntime", "skipped":
          "no CUDAExecutionProvider in this onnxruntime (" + ", ".join(ort.get_available_providers()) + ")"}))
    sys.exit(0)
if name == "resnet50":
    import torchvision
    model = torchvision.models.resnet50().eval().half().cuda()
    example = torch.randn(1, 3, 224, 224).half().cuda()
    make = lambda b: np.random.default_rng(0).standard_normal((b, 3, 224, 224)).astype(np.float16)
else:
    from transformers import BertConfig, BertForMaskedLM
    model = BertForMaskedLM._from_config(BertConfig(), attn_implementation="eager").eval().half().cuda()
    example = torch.randint(0, 30522, (1, 128)).cuda()
    make = lambda b: np.random.default_rng(0).integers(0, 30522, (b, 128), dtype=np.int64)
torch.onnx.export(model, (example,), path, input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, dynamo=False)
session = ort.InferenceSession(path, providers=["CUDAExecutionProvider"])
out = {}
for b in batches:
    x = make(b)
    lat = []
    for i in range(120):
        binding = session.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("y", "cuda")  # outputs stay on the GPU, as on the other sides
        t = time.monotonic()
        session.run_with_iobinding(binding)
        if i >= 20:
            lat.append(time.monotonic() - t)
    lat.sort()
    pct = lambda p: lat[max(0, -(-p * len(lat) // 100) - 1)] * 1000
    out[b] = {"p50_ms": pct(50), "p99_ms": pct(99), "samples_per_s": b * len(lat) / sum(lat)}
peer = {"name": name, "mode": "onnxruntime fp16", "ort": ort.__version__, "batches": out}
print("@@peer " + json.dumps(peer), flush=True)
"""


def run(cmd, log: Path, timeout: float, env: dict | None = None):
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        log.write_text(f"$ {' '.join(map(str, cmd))}\ntimed out after {timeout} s")
        return None
    log.write_text(
        f"$ {' '.join(map(str, cmd))}\n--- stdout\n{result.stdout[-20000:]}\n--- stderr\n{result.stderr[-20000:]}"
    )
    return result


def peer_line(result) -> dict | None:
    if result is None:
        return None
    line = next((printed for printed in result.stdout.splitlines() if printed.startswith("@@peer ")), None)
    return json.loads(line[7:]) if line else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="resnet50,bert_base")
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--gpu", type=int, default=0, help="which GPU (NVML/PCI order) every side runs on")
    args = parser.parse_args()
    # the peers see only that GPU, numbered as NVML numbers it (gpuscout's own --gpu does the same)
    peer_env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(args.gpu))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    left = lambda: args.budget_s - (time.monotonic() - started)  # noqa: E731
    batches = ",".join(map(str, BATCHES))
    summary: dict = {}
    for name in args.models.split(","):
        part: dict = {}
        result = run(
            [
                sys.executable,
                "-m",
                "gpuscout",
                "bench",
                name,
                "--mode",
                "inference",
                "--backend",
                "jax",
                "--precision",
                "mixed_bfloat16",
                "--batch-sizes",
                batches,
                "--requests",
                str(REQUESTS),
                "--warmup-requests",
                str(WARMUP),
                "--gpu",
                str(args.gpu),
                "--json",
                "--store",
                str(args.out / "results.sqlite"),
            ],
            args.out / f"gpuscout_{name}.log",
            max(30, min(300, left())),
        )
        if result is not None and result.returncode == 0:
            runs = json.loads(result.stdout)["runs"]
            part["gpuscout"] = {
                r["batch_size"]: {
                    "p50_ms": r["latency"]["p50_ms"],
                    "p99_ms": r["latency"]["p99_ms"],
                    "samples_per_s": r["samples_per_s"],
                    "run_id": r["id"],
                    "input_path": r.get("input_path"),
                }
                for r in runs
            }
        for mode in ("eager", "compiled"):
            if left() < 60:
                part[mode] = "skipped: budget"
                continue
            part[mode] = peer_line(
                run(
                    [sys.executable, "-c", PEER, name, mode, batches],
                    args.out / f"torch_{mode}_{name}.log",
                    max(30, min(300, left())),
                    peer_env,
                )
            )
        if left() > 60:
            part["onnxruntime"] = peer_line(
                run(
                    [sys.executable, "-c", ORT, name, str(args.out / f"{name}.onnx"), batches],
                    args.out / f"ort_{name}.log",
                    max(30, min(240, left())),
                    peer_env,
                )
            )
        summary[name] = part
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
        (args.out / f"{name}.onnx").unlink(missing_ok=True)
    print(
        f"{'model':10} {'batch':>5} {'gpuscout p50/p99 ms':>20} {'samples/s':>10} | "
        f"{'eager':>18} {'compiled':>18} {'ORT fp16':>18}   best peer samples/s, ratio"
    )
    for name, part in summary.items():
        ours = part.get("gpuscout") or {}
        for b in BATCHES:
            g = ours.get(b) or ours.get(str(b)) or {}
            cells, rates = [], []
            for key in ("eager", "compiled", "onnxruntime"):
                p = part.get(key)
                row = ((p or {}).get("batches") or {}).get(str(b)) if isinstance(p, dict) else None
                cells.append(f"{row['p50_ms']:.2f}/{row['p99_ms']:.2f} {row['samples_per_s']:.0f}" if row else "—")
                if row:
                    rates.append(row["samples_per_s"])
            best = max(rates) if rates else None
            ratio = g.get("samples_per_s", 0) / best if best and g else None
            print(
                f"{name:10} {b:>5} {g.get('p50_ms', 0):>9.2f}/{g.get('p99_ms', 0):<9.2f} "
                f"{g.get('samples_per_s', 0):>10.0f} | "
                f"{cells[0]:>18} {cells[1]:>18} {cells[2]:>18}   {best or 0:.0f} {ratio or 0:.2f}x"
            )
    for name, part in summary.items():
        for b, g in sorted((part.get("gpuscout") or {}).items(), key=lambda kv: int(kv[0])):
            if g.get("input_path"):
                print(f"{name} batch {b}: input copy {g['input_path']['method']} of {g['input_path']['copy_ms']} (ms)")
    print("elapsed", round(time.monotonic() - started), "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
