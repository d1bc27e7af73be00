"""What tune's warm starts save a run, and that a forked run measures what a cold one does.

In one call, --runs pairs of watched runs of one script under one setting, as tune's session
makes them (measure/series.py): in each pair one run starts cold and one is forked from the warm
interpreter made for that environment, who goes first alternating. Each run's wall time (what the
session waits for it) and its headline figure (its whole epochs after the first, samples/s) are
kept. The warm interpreter is made before the first pair (its imports are the cold run's: not
counted against either side).

    python benchmarks/tune_warm_runs.py [--runs 6] [--steps 192] [--mode nojit] [--backend jax]

Prints each run, then the medians a side: the wall time's ratio (cold / warm: what a run saves)
and the headline's ratio (warm / cold: 1.00 where forking changes nothing measured).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNE_ME = ROOT / "tests" / "fixtures" / "watch" / "tune_me.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="pairs of runs (one cold, one warm)")
    parser.add_argument("--steps", type=int, default=192, help="training steps a run (whole epochs)")
    parser.add_argument("--mode", default="nojit", help="tune_me.py's mode")
    parser.add_argument("--backend", default="jax")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT / "src"))
    from gpuscout.measure import engine
    from gpuscout.measure.command import resolve
    from gpuscout.measure.series import Runs
    from gpuscout.measure.watching import WatchOptions, watch_command
    from gpuscout.report.watch_live import view_for
    from gpuscout.store import Store
    from gpuscout.telemetry.nvml import Nvml

    with tempfile.TemporaryDirectory() as folder:
        here = Path(folder)
        script = here / "train.py"
        script.write_text(TUNE_ME.read_text())
        command = resolve([sys.executable, str(script), args.mode])
        options = WatchOptions(steps=args.steps, whole_epochs=True)
        runs = Runs.begin(here)
        kept: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        with Store(here / "results.sqlite") as store:
            session = engine.Session(nvml=Nvml())

            def one(side: str) -> None:
                began = time.monotonic()
                shared = runs.cold() if side == "cold" else runs
                record = watch_command(command, options, session, store, view_for(True, True), shared)
                wall = time.monotonic() - began
                assert record.warm_start == (side == "warm"), (side, record.id)
                kept[side].append((wall, record.samples_per_s or 0.0))
                print(
                    f"{side}: {wall:5.2f} s wall, {record.samples_per_s or 0:8,.0f} samples/s ({record.id})", flush=True
                )

            one("cold")  # the probe: what the warm interpreters learn the frameworks from
            runs.starter(command, runs.instrumentation.env(dict(os.environ), options.settings(None)), None)
            kept["cold"].clear()
            for pair in range(args.runs):
                for side in ("cold", "warm") if pair % 2 == 0 else ("warm", "cold"):
                    one(side)
        runs.close()
    walls = {side: statistics.median(w for w, _ in values) for side, values in kept.items()}
    rates = {side: statistics.median(r for _, r in values) for side, values in kept.items()}
    print(
        f"median wall: cold {walls['cold']:.2f} s, warm {walls['warm']:.2f} s: {walls['cold'] / walls['warm']:.2f}x; "
        f"median headline: cold {rates['cold']:,.0f}, warm {rates['warm']:,.0f} samples/s: "
        f"warm/cold {rates['warm'] / rates['cold']:.2f}"
    )


if __name__ == "__main__":
    main()
