"""A user's script on every GPU of the host, by hand and through gpuscout (issue 48), in one call:

1. by hand, ABAB: benchmarks/user_input/dp_train.py `one`, `spread` (DataParallel written in, the
   same global batch) and `spread_batch` (the global batch x the GPUs), each timed by its own
   callback, ROUNDS rounds in turn;
2. `gpuscout tune --only data_parallel` of the unchanged `one` script: the injected changes'
   speed-ups with their CIs, against the hand-written ones' (the same windows test, analysis/compare);
3. `gpuscout watch` of `one` (the verdict on GPUs left idle) and of `spread` (what watch reads of a
   spread step: replicas, per-device batch, each GPU's busy share).

    PYTHONPATH=src python benchmarks/data_parallel_script.py --out OUT [--rounds 3] [--steps 200] [--shape heavy]

Writes every report and log to OUT and OUT/summary.json; prints the summary and a short table last.
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

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "user_input" / "dp_train.py"
ENV = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}


def by_hand(mode: str, shape: str, out: Path, name: str) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), mode, shape], capture_output=True, text=True, env=ENV,
                          timeout=300)
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    line = next((l for l in reversed(done.stdout.splitlines()) if l.startswith("{")), None)
    if line is None:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(line)


def gpuscout(*args: str, out: Path, name: str) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=ENV,
                          timeout=560)
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
    parser.add_argument("--shape", default="light", choices=("light", "heavy"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = str(args.out / "results.sqlite")
    parts = args.parts.split(",")
    summary: dict = {}
    if "hand" in parts:
        windows = {m: [] for m in ("one", "spread", "spread_batch")}
        for r in range(args.rounds):
            for mode in windows:
                result = by_hand(mode, args.shape, args.out, f"hand-{mode}-{r}")
                windows[mode] += result["window_samples_per_s"]
                summary.setdefault("devices", result["devices"])
                print(f"hand {mode} {r}: {statistics.median(result['window_samples_per_s']):,.0f} samples/s",
                      flush=True)
        summary["hand"] = {m: {"median": statistics.median(w), "windows": w} for m, w in windows.items()}
        for mode in ("spread", "spread_batch"):
            c = contrast(windows[mode], windows["one"])
            summary["hand"][mode].update(ratio=c.ratio, ratio_low=c.ratio_low, ratio_high=c.ratio_high)
    if "tune" in parts:
        report = gpuscout("tune", "--json", "--only", "data_parallel", "--steps", args.steps, "--store", store, "--",
                          sys.executable, str(SCRIPT), "one", args.shape, out=args.out, name="tune")
        summary["tune"] = {r["change"]: {k: r.get(k) for k in ("ratio", "ratio_low", "ratio_high", "verdict",
                                                                "efficiency", "devices", "samples_per_s", "healthy")}
                           for r in report["rows"] if r["round"] == 1}
        summary["tune"]["wall_s"] = report.get("wall_s")
    if "watch" in parts:
        for mode in ("one", "spread"):
            record = gpuscout("watch", "--json", "--steps", args.steps, "--store", store, "--", sys.executable,
                              str(SCRIPT), mode, args.shape, out=args.out, name=f"watch-{mode}")["runs"][0]
            main_fit = max(record["fits"], key=lambda f: f["steps"])
            summary[f"watch_{mode}"] = {
                "samples_per_s": record["samples_per_s"], "replicas": main_fit["replicas"],
                "devices": main_fit["devices"], "strategy": main_fit["strategy"], "batch": main_fit["batch_size"],
                "busy_per_gpu": [t["gpu_util_mean_pct"] for t in record.get("telemetry_per_gpu") or []],
                "verdict": [(c["code"], c["saving_share"]) for c in record["verdict"]]}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "hand"}))
    for mode, h in summary.get("hand", {}).items():
        extra = f" {h['ratio']:.3f}x [{h['ratio_low']:.3f}-{h['ratio_high']:.3f}]" if "ratio" in h else ""
        print(f"hand {mode}: {h['median']:,.0f} samples/s{extra}")
    for change, row in summary.get("tune", {}).items():
        if isinstance(row, dict) and row.get("ratio"):
            print(f"tune {change}: {row['samples_per_s']:,.0f} samples/s {row['ratio']:.3f}x "
                  f"[{row['ratio_low']:.3f}-{row['ratio_high']:.3f}] {row['verdict']}, efficiency {row['efficiency']:.1%}")


if __name__ == "__main__":
    main()
