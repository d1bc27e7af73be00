"""`gpuscout watch` on a GPU (jax backend), for docs/benchmarks.md, in one call:

1. the user-style ResNet-50 script (benchmarks/watch_user_resnet50.py, Keras fit, bf16, batch
   256) fed from data cached on the GPU (device slices), once plainly to fill JAX's compilation
   cache (so that the runs after it load the compiled program instead of compiling each time);
2. the overhead of watch: the same script plainly and under `gpuscout watch`, alternated
   `--pairs` times; each run's own epoch times (epochs 2 on) are compared, and two plain runs give
   the noise floor;
3. under `gpuscout watch --steps`: the same on-GPU arrays given to fit(x, y) as most users
   would (Keras gathers each batch on the host), and a Python generator doing per-image work: the
   verdicts, their input wait shares and the GPU's utilisation;
4. the peer for the step time: `gpuscout bench resnet50` on the same GPU, batch and precision.

    python benchmarks/watch_on_gpu.py --out OUTDIR [--pairs 3]

Writes every run's output and the store's records (records.json) under OUTDIR and prints a short
table last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
USER_SCRIPT = HERE / "watch_user_resnet50.py"
EPOCH = re.compile(r"^epoch (\d+) ([0-9.]+) s")


def run(name: str, argv: list[str], env: dict, out: Path) -> subprocess.CompletedProcess:
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    (out / f"{name}.stdout.txt").write_text(proc.stdout)
    (out / f"{name}.stderr.txt").write_text(proc.stderr[-200_000:])
    print(f"-- {name}: exit {proc.returncode} in {time.monotonic() - began:.0f} s", flush=True)
    return proc


def epoch_times(text: str) -> list[float]:
    """The script's own epoch times, the first (compilation) left out."""
    times = {int(m.group(1)): float(m.group(2)) for m in map(EPOCH.match, text.splitlines()) if m}
    return [t for epoch, t in sorted(times.items()) if epoch > 1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=7)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store.sqlite"
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        GPUSCOUT_STORE=str(store),
        JAX_COMPILATION_CACHE_DIR=str(Path("/tmp") / "gpuscout-jax-cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        COLUMNS="100",
    )
    script = [sys.executable, str(USER_SCRIPT)]
    gpuscout = [sys.executable, "-m", "gpuscout"]
    cached = [*script, "cached", "--epochs", str(args.epochs)]

    run("warm", cached, env, out)
    plain, watched, records = [], [], []
    for pair in range(args.pairs):
        for kind in ("plain", "watched") if pair % 2 == 0 else ("watched", "plain"):
            if kind == "plain":
                proc = run(f"plain-{pair}", cached, env, out)
                plain.append(epoch_times(proc.stdout))
            else:
                proc = run(f"watched-{pair}", [*gpuscout, "watch", "--json", "--", *cached], env, out)
                watched.append(epoch_times(proc.stderr))  # --json: the script's stdout goes to stderr
                if proc.returncode == 0:
                    records.append(json.loads(proc.stdout)["runs"][0])
    arr = run(
        "arrays", [*gpuscout, "watch", "--json", "--steps", "96", "--", *script, "arrays", "--epochs", "3"], env, out
    )
    arrays = json.loads(arr.stdout)["runs"][0] if arr.returncode == 0 else None
    gen = run(
        "generator",
        [
            *gpuscout,
            "watch",
            "--json",
            "--steps",
            "48",
            "--",
            *script,
            "generator",
            "--epochs",
            "100",
            "--steps-per-epoch",
            "16",
        ],
        env,
        out,
    )
    generator = json.loads(gen.stdout)["runs"][0] if gen.returncode == 0 else None
    bench = run(
        "bench",
        [
            *gpuscout,
            "bench",
            "resnet50",
            "--backend",
            "jax",
            "--precision",
            "mixed_bfloat16",
            "--batch-size",
            "256",
            "--json",
        ],
        env,
        out,
    )
    peer = json.loads(bench.stdout)["runs"][0] if bench.returncode == 0 else None
    subprocess.run([*gpuscout, "results", "export", "-o", str(out / "records.json")], env=env)

    print("\n== overhead: the script's own epoch time (median of epochs 2+), plain vs under gpuscout watch")
    medians_plain = [statistics.median(t) for t in plain if t]
    medians_watched = [statistics.median(t) for t in watched if t]
    for i, (p, w) in enumerate(zip(medians_plain, medians_watched)):
        print(f"  pair {i}: plain {p:.4f} s, watched {w:.4f} s, watched/plain {w / p:.4f}")
    if medians_plain and medians_watched:
        print(
            f"  all runs: plain {statistics.median(medians_plain):.4f} s, watched "
            f"{statistics.median(medians_watched):.4f} s: overhead "
            f"{statistics.median(medians_watched) / statistics.median(medians_plain) - 1:+.2%}; plain runs' spread "
            f"{(max(medians_plain) - min(medians_plain)) / statistics.median(medians_plain):.2%}"
        )
    for name, record in [("cached", records[0] if records else None), ("arrays", arrays), ("generator", generator)]:
        if record is None:
            print(f"== {name}: no record")
            continue
        t = record.get("telemetry") or {}
        print(
            f"== {name} under watch: step {1000 * (record['step_time_s'] or 0):.1f} ms, "
            f"{record['samples_per_s'] or 0:,.0f} samples/s, "
            f"input wait {100 * (record['input_wait_share'] or 0):.1f}%, "
            f"outside the step {100 * (record['outside_step_share'] or 0):.1f}%, GPU busy "
            f"{t.get('gpu_util_mean_pct') or 0:.0f}%, MFU {100 * (record['mfu'] or 0):.1f}%"
        )
        for cause in record["verdict"]:
            print(f"   {cause['code']}: {cause['message']}")
    if peer and records:
        fit_step, bench_step = records[0]["step_time_s"], peer["step_time_s"]
        print(
            f"== peer: gpuscout bench resnet50 bf16 batch 256: step {1000 * bench_step:.1f} ms, "
            f"{peer['samples_per_s']:,.0f} samples/s, MFU {100 * (peer['mfu'] or 0):.1f}%; the user's fit "
            f"{1000 * fit_step:.1f} ms: fit/bench step time {fit_step / bench_step:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
