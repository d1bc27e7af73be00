"""Worker processes for a GIL-bound PyDataset under jax (issue 77), in one call: Keras' own
threads and forked processes beside tune's SpawnedWorkers (new interpreters), each watched on the
unchanged script (benchmarks/user_input/gil_pydataset.py) for the same duration, then
`gpuscout tune` of the script as left, to see whether it reaches process_workers by itself.

    python benchmarks/process_workers.py --out OUTDIR [--workers 8] [--duration 40s] [--budget 4]

Writes every report under OUTDIR and prints a short table last: samples/s by the run's own
figure, and each against one thread (the peer measured in the same call).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuscout_cli import gpuscout, watched  # benchmarks/ is the script's folder

SCRIPT = Path(__file__).resolve().parent / "user_input" / "gil_pydataset.py"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--duration", default="40s")
    parser.add_argument("--budget", default="4")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    store = str(args.out / "results.sqlite")
    n = str(args.workers)
    settings = {
        "1 thread (as left)": ["1"],
        f"{n} threads": [n],
        f"{n} forked processes (Keras)": [n, "processes"],
        f"{n} spawned processes (SpawnedWorkers)": [n, "spawned"],
    }
    rows: dict[str, float | None] = {}
    for name, extra in settings.items():
        report, wall = gpuscout(
            [
                "watch",
                "--json",
                "--duration",
                args.duration,
                "--store",
                store,
                "--",
                sys.executable,
                str(SCRIPT),
                *extra,
            ],
            args.out,
            name.split(" (")[0].replace(" ", "_"),
            env,
            timeout=600,
        )
        rows[name], _ = watched(report)
        print(f"{name}: {rows[name]} samples/s ({wall:.0f} s)", flush=True)
    tuned, wall = gpuscout(
        ["tune", "--json", "--budget-minutes", args.budget, "--store", store, "--", sys.executable, str(SCRIPT)],
        args.out,
        "tune",
        env,
        timeout=900,
    )
    one = rows["1 thread (as left)"]
    print()
    for name, rate in rows.items():
        ratio = f"{rate / one:.2f}x" if rate and one else "-"
        print(f"{name:42} {rate or 0:>10,.0f} samples/s  {ratio}")
    if tuned:
        print(f"tune ({wall:.0f} s): path {' > '.join(tuned.get('path') or [])}")
        for r in tuned.get("rows", []):
            print(f"  {r['change']:28} {r.get('verdict')} {r.get('ratio') or 0:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
