"""The CI gate on held-back pairs of exports, and watch's headline against the script's own clock
(issue 75: "the headline within 5% of the script's own epoch clock; the gate ... never exiting 0
on a regression of more than PCT").

    python benchmarks/gate_held_back_pairs.py --out OUTDIR [--small] [--runs 3]
        [--sleeps 0,0.2,1,4] [--loads 0,4] [--pct 5]

For each load (0: a quiet machine; N: N busy-looping processes beside the runs, as a shared CI
runner has), one side of --runs watched runs of benchmarks/user_input/clocked_cnn.py (validation
and a checkpoint each epoch, its own clock printed) is the baseline; each --sleeps value (ms of
host work after each step: 0 is a pull request that changes nothing) is another side of --runs,
exported and gated against it with `compare BASE.json NEW.json --fail-slower PCT --json`.

What a pair truly is comes from the script's own clock (the sides' median samples/s over their
steady epochs); the gate never sees it. Prints each watched run's headline over its own clock,
each pair's true ratio beside the gate's exit, ratio and interval, and last the check: how many
pairs slower than PCT by the script's clock the gate passed (exit 0), which must be none.
Everything is kept under OUTDIR (summary.json, each run's output).
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

from gpuscout_cli import gpuscout  # benchmarks/ is the script's folder

USER_INPUT = Path(__file__).resolve().parent / "user_input"
CLOCK = re.compile(r"clock epoch=(\d+) steps=(\d+) samples=(\d+) seconds=([0-9.]+)")
BUSY = "import time\nwhile True:\n    sum(i * i for i in range(10_000))\n"


def own_rate(stderr: str) -> float | None:
    """The script's own samples/s over its steady epochs (the first, with the compile, left out)."""
    epochs = [(int(n), float(s)) for _, _, n, s in CLOCK.findall(stderr)][1:]
    seconds = sum(s for _, s in epochs)
    return sum(n for n, _ in epochs) / seconds if seconds > 0 else None


def headline(run: dict) -> float | None:
    """watch's throughput: its steady whole epochs' samples over their wall time."""
    clock = run.get("clock")
    if not clock or not clock["steady"]:
        return None
    return sum(e["samples"] for e in clock["steady"]) / sum(e["seconds"] for e in clock["steady"])


def side(out: Path, name: str, runs: int, env: dict) -> dict:
    """--runs watched runs into a store of their own, exported as OUTDIR/NAME.json."""
    store = out / f"{name}.sqlite"
    rows = []
    for i in range(runs):
        report, wall = gpuscout(
            ["watch", "--json", "--store", str(store), "--", sys.executable, str(USER_INPUT / "clocked_cnn.py")],
            out,
            f"{name}_{i}",
            env,
            timeout=600,
        )
        stderr = (out / f"{name}_{i}.stderr.txt").read_text()
        run = report["runs"][0] if report else {}
        rows.append(
            {
                "id": run.get("id"),
                "headline": headline(run),
                "own": own_rate(stderr),
                "windows": run.get("samples_per_s"),
                "wall_s": wall,
            }
        )
    exported = out / f"{name}.json"
    subprocess.run(
        [sys.executable, "-m", "gpuscout", "results", "export", "--store", str(store), "-o", str(exported), "--force"],
        check=True,
        capture_output=True,
    )
    return {"runs": rows, "file": str(exported), "own_median": statistics.median(r["own"] for r in rows if r["own"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--small", action="store_true", help="the CPU's size of the script")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sleeps", default="0,0.2,1,4", help="ms of host work after each step, a side each")
    parser.add_argument("--loads", default="0,4", help="busy processes beside the runs, a round each")
    parser.add_argument("--pct", type=float, default=5.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(USER_INPUT), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **({"SMALL": "1"} if args.small else {}),
    }
    began = time.monotonic()
    rounds = []
    for load in (int(n) for n in args.loads.split(",")):
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(load)]
        try:
            tag = f"load{load}"
            base = side(args.out, f"{tag}_base", args.runs, env)
            pairs = []
            for ms in (float(v) for v in args.sleeps.split(",")):
                new = side(args.out, f"{tag}_sleep{ms:g}", args.runs, {**env, "STEP_SLEEP_MS": str(ms)})
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "gpuscout",
                        "compare",
                        base["file"],
                        new["file"],
                        "--fail-slower",
                        str(args.pct),
                        "--json",
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                line = json.loads(done.stdout)["lines"][0] if done.stdout.strip() else {}
                pairs.append(
                    {
                        "sleep_ms": ms,
                        "true_ratio": new["own_median"] / base["own_median"],
                        "exit": done.returncode,
                        "line": line,
                        "side": new,
                    }
                )
                print(
                    f"load {load}, +{ms:g} ms a step: true {pairs[-1]['true_ratio']:.3f}, gate exit {done.returncode}: "
                    f"{line.get('text', done.stderr.strip())}",
                    flush=True,
                )
            rounds.append({"load": load, "base": base, "pairs": pairs})
        finally:
            for p in busy:
                p.kill()
    runs = [r for rnd in rounds for s in [rnd["base"], *(p["side"] for p in rnd["pairs"])] for r in s["runs"]]
    ratios = [r["headline"] / r["own"] for r in runs if r["headline"] and r["own"]]
    threshold = 1 - args.pct / 100
    passed_slower = [p for rnd in rounds for p in rnd["pairs"] if p["true_ratio"] < threshold and p["exit"] == 0]
    summary = {
        "runs": len(runs),
        "headline_over_own": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "pairs": [
            {"load": rnd["load"], **{k: v for k, v in p.items() if k != "side"}} for rnd in rounds for p in rnd["pairs"]
        ],
        "slower_than_pct_passed": len(passed_slower),
        "session_s": time.monotonic() - began,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    h = summary["headline_over_own"]
    print(
        f"\nheadline / script's own clock over {len(ratios)} runs: median {h['median']:.3f}, "
        f"{h['min']:.3f}-{h['max']:.3f}"
    )
    print(f"{'load':>4} {'+ms':>5} {'true':>6} {'exit':>4} {'gate ratio [95% CI]':>26} runs_needed")
    for p in summary["pairs"]:
        line = p["line"]
        ci = f"{line.get('ratio', 0):.3f} [{line.get('ratio_low') or 0:.3f}-{line.get('ratio_high') or 0:.3f}]"
        needed = line.get("runs_needed")
        print(f"{p['load']:>4} {p['sleep_ms']:>5g} {p['true_ratio']:>6.3f} {p['exit']:>4} {ci:>26} {needed}")
    worse = sum(1 for p in summary["pairs"] if p["true_ratio"] < threshold)
    print(
        f"pairs slower than {args.pct:g}% by the script's clock: {worse}; passed by the gate (exit 0): "
        f"{len(passed_slower)} (must be 0); session {summary['session_s']:.0f} s"
    )


if __name__ == "__main__":
    main()
