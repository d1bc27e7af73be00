"""`gpuscout recommend --from RUN` against the GPU it predicts (issue 32).

On a lent GPU (one call per GPU kind), watch three user scripts of different bottlenecks
(benchmarks/recommend_user_scripts.py: GPU-bound, input-bound, host-bound), each `--repeats` times,
into OUT/results.sqlite:

    PYTHONPATH=src python benchmarks/recommend_from_run.py watch --out OUT [--duration 20] [--small]

Then, here, predict each script's samples/s on the second GPU from its record on the first, and
compare with what the second measured; the peer is the prediction that scales the whole step with
the GPU (what recommend would say without the bottleneck split):

    PYTHONPATH=src python benchmarks/recommend_from_run.py compare H100_STORE H200_STORE
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
SCRIPTS = ("gpu", "input", "host")


def watch(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.sqlite"
    for repeat in range(args.repeats):
        for script in SCRIPTS:
            command = [sys.executable, str(HERE / "recommend_user_scripts.py"), script] + (["--small"] if args.small else [])
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "gpuscout", "watch", "--duration", str(args.duration), "--json",
                                   "--store", str(store), "--", *command], capture_output=True, text=True,
                                  timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            name = f"{script}-{repeat}"
            (args.out / f"{name}.json").write_text(done.stdout)
            (args.out / f"{name}.stderr.txt").write_text(done.stderr[-100_000:])
            try:
                record = json.loads(done.stdout)["runs"][0]
            except (ValueError, KeyError, IndexError):
                print(f"{name}: exit {done.returncode}: {done.stderr[-1500:]}", flush=True)
                continue
            util = (record.get("telemetry") or {}).get("gpu_util_mean_pct")
            print(f"{name}: run {record['id']} {record.get('samples_per_s') or 0:,.0f} samples/s, input wait "
                  f"{record.get('input_wait_share') or 0:.0%}, between steps {record.get('outside_step_share') or 0:.0%}, "
                  f"GPU util {util or 0:.0f}% ({time.monotonic() - started:.0f} s)", flush=True)


def _records(path: Path) -> dict[str, list]:
    from gpuscout.store import Store

    with Store(path, readonly=True) as store:
        runs = store.list(kind="watch")
    by_script: dict[str, list] = {}
    for r in sorted(runs, key=lambda r: r.created_utc):
        if r.ok and r.samples_per_s:
            by_script.setdefault(r.command[2] if len(r.command) > 2 else r.workload, []).append(r)
    return by_script


def compare(args: argparse.Namespace) -> None:
    from gpuscout import catalog as catalog_lib
    from gpuscout.core import predict
    from gpuscout.recommend import from_run, ranking

    cat = catalog_lib.load(None)
    first, second = _records(args.first), _records(args.second)
    rows, errors, peer_errors = [], [], []
    for script in SCRIPTS:
        if script not in first or script not in second:
            print(f"{script}: missing on one side")
            continue
        measured = statistics.median(r.samples_per_s for r in second[script])
        target = cat.get(second[script][0].gpu.catalog_id)
        for record in first[script]:
            answer = from_run.recommendation(record, cat, ranking.Constraints(max_gpus=1), predict_pricing())
            row = next(r for r in answer.rows if r.gpu.id == target.id)
            predicted = row.throughput
            m = answer.measured
            whole = predict.scale(m.samples_per_s, m.gpu, target, answer.job.precision,
                                  predict.alpha(answer.job.intensity))
            error, peer = predicted.throughput / measured - 1, whole / measured - 1
            errors.append(abs(error))
            peer_errors.append(abs(peer))
            rows.append(f"| {script} | {record.id} | {m.samples_per_s:,.0f} | {m.split.gpu_share:.0%} / "
                        f"{m.split.input_share:.0%} / {m.split.host_share:.0%} | {predicted.throughput:,.0f} "
                        f"[{predicted.low:,.0f}-{predicted.high:,.0f}] | {measured:,.0f} "
                        f"({len(second[script])} run{'s' if len(second[script]) > 1 else ''}) | {error:+.1%} | "
                        f"{whole:,.0f} ({peer:+.1%}) |")
    print(f"| script | {args.first.parent.name} run | samples/s there | GPU / input / host | predicted on "
          f"{args.second.parent.name} [band] | measured there | error | whole step scaled (error) |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if errors:
        print(f"\nmedian |error|: split {statistics.median(errors):.1%}, whole step scaled "
              f"{statistics.median(peer_errors):.1%} ({len(errors)} predictions)")


def predict_pricing():
    from gpuscout.core.pricing import PricingOptions

    return PricingOptions()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--duration", default="20")
    w.add_argument("--repeats", type=int, default=1)
    w.add_argument("--small", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("first", type=Path)
    c.add_argument("second", type=Path)
    args = parser.parse_args()
    watch(args) if args.verb == "watch" else compare(args)


if __name__ == "__main__":
    main()
