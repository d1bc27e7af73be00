"""`gpuscout recommend --from RUN` against the GPU it predicts (issue 32).

On a lent GPU (one call per GPU kind), watch three user scripts of different bottlenecks
(benchmarks/recommend_user_scripts.py: GPU-bound, input-bound, host-bound), each `--repeats` times,
into OUT/results.sqlite:

    PYTHONPATH=src python benchmarks/recommend_from_run.py watch --out OUT [--duration 20] [--small]

Then, here, predict each script's samples/s on the second GPU from its record on the first, and
compare with what the second measured; the peer is the prediction that scales the whole step with
the GPU (what recommend would say without the bottleneck split):

    PYTHONPATH=src python benchmarks/recommend_from_run.py compare H100_STORE H200_STORE

A sweep's wall time (`--trials`), on one lent GPU: watch one whole training of a script, then
sweep N such trainings (a grid of learning rates) with `trials_per_gpu` 1 and m, and compare each
wall time with the one recommend predicted from the watched run alone:

    PYTHONPATH=src python benchmarks/recommend_from_run.py sweep --out OUT --script input --epochs 3 --per-gpu 1,3
    PYTHONPATH=src python benchmarks/recommend_from_run.py sweepcheck OUT
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
            command = [sys.executable, str(HERE / "recommend_user_scripts.py"), script] + (
                ["--small"] if args.small else []
            )
            started = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuscout",
                    "watch",
                    "--duration",
                    str(args.duration),
                    "--json",
                    "--store",
                    str(store),
                    "--",
                    *command,
                ],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
            name = f"{script}-{repeat}"
            (args.out / f"{name}.json").write_text(done.stdout)
            (args.out / f"{name}.stderr.txt").write_text(done.stderr[-100_000:])
            try:
                record = json.loads(done.stdout)["runs"][0]
            except (ValueError, KeyError, IndexError):
                print(f"{name}: exit {done.returncode}: {done.stderr[-1500:]}", flush=True)
                continue
            util = (record.get("telemetry") or {}).get("gpu_util_mean_pct")
            print(
                f"{name}: run {record['id']} {record.get('samples_per_s') or 0:,.0f} samples/s, input wait "
                f"{record.get('input_wait_share') or 0:.0%}, "
                f"between steps {record.get('outside_step_share') or 0:.0%}, "
                f"GPU util {util or 0:.0f}% ({time.monotonic() - started:.0f} s)",
                flush=True,
            )


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
    from gpuscout.catalog import predict
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
            whole = predict.scale(
                m.samples_per_s, m.gpu, target, answer.job.precision, predict.alpha(answer.job.intensity)
            )
            error, peer = predicted.throughput / measured - 1, whole / measured - 1
            errors.append(abs(error))
            peer_errors.append(abs(peer))
            rows.append(
                f"| {script} | {record.id} | {m.samples_per_s:,.0f} | {m.split.gpu_share:.0%} / "
                f"{m.split.input_share:.0%} / {m.split.host_share:.0%} | {predicted.throughput:,.0f} "
                f"[{predicted.low:,.0f}-{predicted.high:,.0f}] | {measured:,.0f} "
                f"({len(second[script])} run{'s' if len(second[script]) > 1 else ''}) | {error:+.1%} | "
                f"{whole:,.0f} ({peer:+.1%}) |"
            )
    print(
        f"| script | {args.first.parent.name} run | samples/s there | GPU / input / host | predicted on "
        f"{args.second.parent.name} [band] | measured there | error | whole step scaled (error) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if errors:
        print(
            f"\nmedian |error|: split {statistics.median(errors):.1%}, whole step scaled "
            f"{statistics.median(peer_errors):.1%} ({len(errors)} predictions)"
        )


LEARNING_RATES = (1e-3, 2e-3, 5e-4, 3e-3, 7e-4, 1.5e-3, 2.5e-3, 4e-4)


def sweep(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.sqlite"
    base = [sys.executable, str(HERE / "recommend_user_scripts.py"), args.script, "--epochs", str(args.epochs)]
    base += ["--small"] if args.small else []
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", "watch", "--json", "--store", str(store), "--", *base, "--lr", "1e-3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    (args.out / "watch.json").write_text(done.stdout)
    (args.out / "watch.stderr.txt").write_text(done.stderr[-100_000:])
    print(f"watch {args.script}: exit {done.returncode} ({time.monotonic() - started:.0f} s)", flush=True)
    for per_gpu in [int(p) for p in args.per_gpu.split(",")]:
        name = f"{args.script}-x{per_gpu}"
        spec = {
            "name": name,
            "command": " ".join(base) + " --lr {lr}",
            "metric": {"name": "loss", "direction": "min"},
            "reports": ["loss"],
            "space": {"lr": list(LEARNING_RATES[: args.trials])},
            "strategy": {"kind": "grid"},
            "trials_per_gpu": per_gpu,
            "timeout_s": 300,
        }
        path = args.out / f"{name}.yaml"
        path.write_text(json.dumps(spec))  # JSON is YAML
        started = time.monotonic()
        where = ["--cpu-slots", str(per_gpu)] if args.small else ["--gpus", "0"]
        done = subprocess.run(
            [sys.executable, "-m", "gpuscout", "sweep", str(path), *where, "--json", "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=580,
            env=env,
        )
        (args.out / f"{name}.json").write_text(done.stdout)
        (args.out / f"{name}.stderr.txt").write_text(done.stderr[-100_000:])
        try:
            summary = json.loads(done.stdout)
            print(
                f"sweep {name}: {summary['status_counts']}, wall {summary['wall_s']:.1f} s "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
        except (ValueError, KeyError):
            print(f"sweep {name}: exit {done.returncode}: {done.stderr[-1500:]}", flush=True)


def sweepcheck(args: argparse.Namespace) -> None:
    """Each measured sweep's wall time against recommend's prediction from the watched run alone,
    and against the prediction from the other sweep (the store's sweep of the same script)."""
    from gpuscout import catalog as catalog_lib
    from gpuscout.recommend import from_run, ranking, sweep_cost
    from gpuscout.store import Store

    cat = catalog_lib.load(None)
    with Store(args.out / "results.sqlite", readonly=True) as store:
        record = store.list(kind="watch")[0]
        sweeps = {name: store.trials(name) for name in store.sweeps()}
    summaries = {p.stem: json.loads(p.read_text()) for p in sorted(args.out.glob("*-x*.json"))}
    print("| sweep | trials | trials/GPU | measured wall | predicted from the watched run | error |")
    print("|---|---|---|---|---|---|")
    for name, summary in summaries.items():
        per_gpu, trials = int(name.rsplit("-x", 1)[1]), summary["trials"]
        answer = from_run.recommendation(record, cat, ranking.Constraints(max_gpus=1), predict_pricing(), trials=trials)
        row = next(r for r in answer.rows if r.gpu.id == answer.measured.gpu.id)
        wall_h = sweep_cost.predicted_wall_h(answer.job, row, trials, 1, per_gpu)
        chosen = next(o for o in answer.sweep.options if o.gpu.id == row.gpu.id and o.gpus == 1)
        m = answer.measured
        print(
            f"| {name} | {trials} | {per_gpu} | {summary['wall_s']:.1f} s | {wall_h * 3600:.1f} s "
            f"(the watched run {row.one_gpu_hours * 3600:.1f} s, of it start-up {m.startup_s:.1f} s with "
            f"compilation {m.compile_s:.1f} s; recommend's pick: {chosen.trials_per_gpu}/GPU, "
            f"{chosen.wall_h * 3600:.1f} s) | {wall_h * 3600 / summary['wall_s'] - 1:+.1%} |"
        )
    for name in sweeps:
        others = {n: t for n, t in sweeps.items() if n != name}
        found = sweep_cost.find_measured(record.workload, others, cat)
        if found:
            print(f"{name}: from the other sweep ({found.label})")


def predict_pricing():
    from gpuscout.catalog.pricing import PricingOptions

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
    sw = sub.add_parser("sweep")
    sw.add_argument("--out", type=Path, required=True)
    sw.add_argument("--script", default="input", choices=SCRIPTS)
    sw.add_argument("--epochs", type=int, default=3)
    sw.add_argument("--trials", type=int, default=6)
    sw.add_argument("--per-gpu", default="1,3")
    sw.add_argument("--small", action="store_true", help="a CPU smoke test: small models, CPU slots")
    check = sub.add_parser("sweepcheck")
    check.add_argument("out", type=Path)
    args = parser.parse_args()
    {"watch": watch, "compare": compare, "sweep": sweep, "sweepcheck": sweepcheck}[args.verb](args)


if __name__ == "__main__":
    main()
