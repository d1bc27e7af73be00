"""ResNet-50 training throughput: gpuscout (Keras 3 / JAX, mixed_bfloat16) next to native
PyTorch eager (torchvision, channels_last, bf16 autocast) on the same GPU, in one call.

Also measures gpuscout's telemetry overhead (the same run with --telemetry and --no-telemetry,
in A-B-A order so drift shows) and, when time allows, JAX with preallocation off.

    python benchmarks/resnet50_vs_torch.py --out OUTDIR [--batch-size 256] [--budget-s 540]

Each measurement runs in its own process. Results go to OUTDIR/summary.json and the logs beside
it; a short table is printed last. Recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TORCH_REFERENCE = r"""
import json, math, statistics, sys, time
import torch, torchvision
batch, windows, window_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
xs = [torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last) for _ in range(4)]
ys = [torch.randint(0, 1000, (batch,), device="cuda") for _ in range(4)]
def step(i):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss
t0 = time.monotonic(); step(0); torch.cuda.synchronize(); first = time.monotonic() - t0
t0 = time.monotonic()
for i in range(10): step(i)
torch.cuda.synchronize(); est = (time.monotonic() - t0) / 10
steps = max(10, math.ceil(window_s / est))
tput = []
for w in range(windows):
    t0 = time.monotonic()
    for i in range(steps): loss = step(i)
    float(loss)
    tput.append(steps * batch / (time.monotonic() - t0))
print("@@torch " + json.dumps({"windows": tput, "median": statistics.median(tput), "first_step_s": first,
      "steps_per_window": steps, "torch": torch.__version__, "torchvision": torchvision.__version__,
      "peak_memory_bytes": torch.cuda.max_memory_allocated()}))
"""


def run(cmd: list[str], log: Path, env: dict | None = None, timeout: float = 600) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = 124, exc.stdout or "", exc.stderr or ""
        out, err = (out.decode() if isinstance(out, bytes) else out), (err.decode() if isinstance(err, bytes) else err)
    with open(log, "a", encoding="utf-8") as handle:  # one log file: the device returns at most 8
        handle.write(f"\n===== $ {' '.join(cmd)}\nexit {code}\n--- stdout\n{out}\n--- stderr\n{err}")
    return code, out, time.monotonic() - start


def gpuscout_run(out_dir: Path, name: str, args: list[str], env: dict) -> dict | None:
    code, out, seconds = run([sys.executable, "-m", "gpuscout", "bench", *args, "--json"], out_dir / "runs.log", env)
    print(f"[{name}] exit {code} in {seconds:.0f} s", flush=True)
    try:
        return json.loads(out)["runs"][0]
    except (ValueError, KeyError, IndexError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--budget-s", type=float, default=540)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    env = dict(os.environ, GPUSCOUT_STORE="/tmp/gpuscout-bench.sqlite")  # $OUT takes at most 8 files
    # Only the later runs profit from the cache; the first run's compile_s is the cold figure.
    env["JAX_COMPILATION_CACHE_DIR"] = "/tmp/gpuscout-jax-cache"
    summary: dict = {"batch_size": args.batch_size}

    code, out, _ = run([sys.executable, "-m", "gpuscout", "doctor", "--json"], args.out / "runs.log", env)
    summary["doctor"] = json.loads(out) if out.strip().startswith("{") else None

    smoke = gpuscout_run(
        args.out, "smoke_mlp", ["mlp", "--backend", "jax", "--windows", "3", "--window-seconds", "0.5"], env
    )
    summary["smoke_mlp"] = smoke and {
        k: smoke[k] for k in ("status", "throughput", "compile_s", "telemetry") if k in smoke
    }

    common = [
        "resnet50",
        "--backend",
        "jax",
        "--precision",
        "mixed_bfloat16",
        "--batch-size",
        str(args.batch_size),
        "--windows",
        "5",
        "--window-seconds",
        "3",
    ]
    runs = {}
    # Telemetry on and off alternate (A-B-A-B) so that drift over the call shows as drift.
    plan = [
        ("gpuscout_telemetry_a", []),
        ("torch", None),
        ("gpuscout_no_telemetry_a", ["--no-telemetry"]),
        ("gpuscout_telemetry_b", []),
        ("gpuscout_no_telemetry_b", ["--no-telemetry"]),
        ("gpuscout_jax_prealloc", "prealloc"),
    ]
    for name, extra in plan:
        if time.monotonic() - began > args.budget_s:
            print(f"[{name}] skipped: over the time budget", flush=True)
            continue
        if extra is None:
            code, out, seconds = run(
                [sys.executable, "-c", TORCH_REFERENCE, str(args.batch_size), "5", "3"], args.out / "runs.log"
            )
            print(f"[torch] exit {code} in {seconds:.0f} s", flush=True)
            line = next((printed for printed in out.splitlines() if printed.startswith("@@torch ")), None)
            runs[name] = json.loads(line[len("@@torch ") :]) if line else None
        elif extra == "prealloc":  # JAX's own default (75% of the GPU up front), for its cost
            runs[name] = gpuscout_run(args.out, name, common, dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="true"))
        else:
            runs[name] = gpuscout_run(args.out, name, common + extra, env)
    summary["runs"] = runs
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))

    def median(name):
        r = runs.get(name)
        if not r:
            return None
        return r["median"] if name == "torch" else (r.get("throughput") or {}).get("median")

    print("\n| run | img/s (median) | CV | compile s | MFU | peak mem GiB | power W |")
    print("|---|---|---|---|---|---|---|")
    for name in runs:
        r = runs[name]
        if r is None:
            print(f"| {name} | failed | | | | | |")
        elif name == "torch":
            cv = statistics.stdev(r["windows"]) / statistics.mean(r["windows"])
            print(
                f"| torch eager | {r['median']:.0f} | {cv:.2%} | {r['first_step_s']:.1f} (first step) | | "
                f"{r['peak_memory_bytes'] / 2**30:.1f} | |"
            )
        else:
            t = r.get("throughput") or {}
            tel = r.get("telemetry") or {}
            mem = r.get("peak_memory_bytes")
            print(
                f"| {name} ({r['status']}) | {t.get('median', 0):.0f} | {(t.get('cv') or 0):.2%} | "
                f"{(r.get('compile_s') or 0):.1f} | {(r.get('mfu') or 0):.1%} | "
                f"{(mem or 0) / 2**30:.1f} | {tel.get('power_mean_w') or ''} |"
            )
    torch_m, on_a, off_a, on_b, off_b = (
        median(n)
        for n in (
            "torch",
            "gpuscout_telemetry_a",
            "gpuscout_no_telemetry_a",
            "gpuscout_telemetry_b",
            "gpuscout_no_telemetry_b",
        )
    )
    if torch_m and on_a:
        print(f"\ngpuscout (telemetry on, first run) / torch eager = {on_a / torch_m:.3f}")
    if on_a and on_b and off_a and off_b:
        print(
            f"telemetry on / off (means of two each) = {(on_a + on_b) / (off_a + off_b):.4f}; "
            f"on B/A drift = {on_b / on_a:.4f}, off B/A drift = {off_b / off_a:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
