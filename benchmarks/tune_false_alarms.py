"""How often tune keeps a change that buys nothing, beside one that buys a lot (issue 86).

Beside a noisy neighbour (--busy processes, each busying a core in bursts of random length, seeded),
in one call:

1. --sessions sessions of `gpuscout tune --json --only workers -- python tune_me.py locked`: a
   PyDataset whose reads (15 ms of waiting a batch) hold one lock, as h5py's reads hold its global
   lock: threads take turns, so more of them buy nothing. With --null watch_me, of
   examples/watch_me.py instead: per-image numpy work on a 2-core host beside a busy neighbour, issue
   86's case, where threads bought nothing by hand. Every session that keeps a thread setting on
   either is a false alarm.
2. --gains sessions of `... tune_me.py pydataset`: a PyDataset that sleeps 15 ms a batch (the GIL
   released), which threads make several at a time: each must still be kept (a miss otherwise).

Each session's report says both rules at once: `chosen` (the setting its round picked: what tune
kept before issue 86, on one run's epochs or windows against the two reference runs beside it)
and `path` (what it keeps now: confirmed between runs after the search, tune/confirm.py). So the
old rule's count and the new one's come from the same runs.

    python benchmarks/tune_false_alarms.py --out OUTDIR [--sessions 20] [--gains 3] [--budget-minutes 3]

Prints last, for each script: sessions, chosen (old rule), kept (new rule), the kept sessions'
figures; writes summary.json under OUTDIR with every session's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from gpuscout_cli import gpuscout  # benchmarks/ is the script's folder

ROOT = Path(__file__).resolve().parents[1]
TUNE_ME = ROOT / "tests" / "fixtures" / "watch" / "tune_me.py"
# Each script tuned, by name: its command's arguments after python, and what threads can buy on it
SCRIPTS = {
    "locked": ([str(TUNE_ME), "locked"], "threads buy nothing (a lock)"),
    # the README's example: a CNN fed by a PyDataset that augments each image in numpy, as issue 86's
    # user's was; by hand beside other work, threads bought nothing there (271.5 against 272.7 samples/s)
    "watch_me": ([str(ROOT / "examples" / "watch_me.py")], "threads on per-image numpy"),
    "pydataset": ([str(TUNE_ME), "pydataset"], "threads buy (sleeping reads)"),
}
# The neighbour's bursts: busy, then idle, each between these (seconds), as a shared box's other
# jobs come and go; seeded, so two runs of the benchmark see the same pattern of lengths
BURST_S = (0.5, 4.0)

NEIGHBOUR = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform({low}, {high})
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform({low}, {high}))
"""


def session(mode: str, out: Path, name: str, budget: str, env: dict) -> dict:
    args = ["tune", "--json", "--only", "workers", "--budget-minutes", budget, "--store", str(out / "store.sqlite")]
    report, wall = gpuscout([*args, "--", sys.executable, *SCRIPTS[mode][0]], out, name, env, timeout=1800)
    if not report:
        return {"name": name, "mode": mode, "failed": True, "wall_s": wall}
    best = report.get("best") or {}
    return {
        "name": name,
        "mode": mode,
        "chosen": report.get("chosen", []),
        "kept": report.get("path", []),
        "round_ratio": next((r.get("ratio") for r in report["rows"] if r.get("chosen")), None),
        "ratio": best.get("ratio"),
        "ratio_low": best.get("ratio_low"),
        "ratio_high": best.get("ratio_high"),
        "confirmation": best.get("confirmation"),
        "wall_s": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--gains", type=int, default=3)
    parser.add_argument("--null", choices=("locked", "watch_me"), default="locked", help="the script of --sessions")
    parser.add_argument("--budget-minutes", default="3")
    parser.add_argument("--seed", type=int, default=86)
    parser.add_argument("--busy", type=int, default=2, help="the neighbour's processes, each a core in bursts")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KERAS_BACKEND="jax", COLUMNS="")
    code = NEIGHBOUR.format(low=BURST_S[0], high=BURST_S[1])
    neighbours = [
        subprocess.Popen([sys.executable, "-c", code, str(args.seed + k)], start_new_session=True)
        for k in range(args.busy)
    ]
    began = time.monotonic()
    results = []
    try:
        order = [args.null] * args.sessions + ["pydataset"] * args.gains
        random.Random(args.seed).shuffle(order)  # the two kinds interleaved: the same neighbour for both
        for i, mode in enumerate(order, 1):
            results.append(session(mode, out, f"{i:02d}-{mode}", args.budget_minutes, env))
            (out / "summary.json").write_text(json.dumps(results, indent=2))
    finally:
        for neighbour in neighbours:
            neighbour.kill()
            neighbour.wait()
    print(
        f"\n{len(results)} sessions in {time.monotonic() - began:.0f} s, beside {args.busy} processes each busy "
        f"in bursts of {BURST_S[0]:g}-{BURST_S[1]:g} s, on {os.cpu_count()} cores"
    )
    print(f"{'script':<28} {'sessions':>8} {'chosen (old)':>13} {'kept (new)':>11}  kept figures")
    for mode, (_, what) in SCRIPTS.items():
        rows = [r for r in results if r["mode"] == mode and not r.get("failed")]
        if not rows:
            continue
        chosen = sum(bool(r["chosen"]) for r in rows)
        kept = [r for r in rows if r["kept"]]
        figures = ", ".join(f"{r['ratio']:.2f}x [{r['ratio_low']:.2f}-{r['ratio_high']:.2f}]" for r in kept)
        print(f"{what:<28} {len(rows):>8} {chosen:>13} {len(kept):>11}  {figures}")
    failed = [r["name"] for r in results if r.get("failed")]
    if failed:
        print(f"no report from: {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
