"""One `python -m gpuscout ...` of a benchmark script: its output kept under OUT as NAME.json and
NAME.stderr.txt, its JSON and wall time returned (None where it printed none)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def gpuscout(args: list[str], out: Path, name: str, env: dict, timeout: float) -> tuple[dict | None, float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    wall = time.monotonic() - began
    (out / f"{name}.json").write_text(done.stdout)
    (out / f"{name}.stderr.txt").write_text(done.stderr[-200_000:])
    print(f"-- {name}: exit {done.returncode} in {wall:.0f} s", flush=True)
    try:
        return json.loads(done.stdout), wall
    except ValueError:
        return None, wall


DIVERGED = " (loss not finite)"


def watched(report: dict | None) -> tuple[float | None, bool]:
    """A `watch --json` report's samples/s, and whether its training diverged (a NaN or infinite
    loss: a speed that is no fix, as tune's own judging holds)."""
    if not report:
        return None, False
    run = report["runs"][0]
    return run["samples_per_s"], any(v["code"] == "loss_not_finite" for v in run["verdict"])


def print_beside(rows: dict[str, float | None], report: dict | None, wall: float, each_row: bool = False) -> None:
    """The table a tune-beside-the-fix-by-hand benchmark prints last: each row's samples/s, tune's
    best against the best row named "by hand ..." whose loss stayed finite (a row named with
    DIVERGED is shown, never compared), tune's path, session, (`each_row`: every setting it
    measured), what is left and how many settings the budget left unrun."""
    print()
    for name, rate in rows.items():
        print(f"{name:40} {rate:12,.0f} samples/s" if rate else f"{name:40} —")
    best = rows.get("tune's best")
    hands = [rate for name, rate in rows.items() if name.startswith("by hand") and DIVERGED not in name and rate]
    if best and hands:
        print(f"{'tune best / best by hand':40} {best / max(hands):12.2f}")
    if report:
        print(f"{'tune path':40} {' -> '.join(['baseline', *report['path']])}")
        print(f"{'tune session':40} {wall:12.0f} s ({report['rounds']} rounds, {len(report['rows'])} settings)")
        for row in report["rows"] if each_row else ():
            print(f"  round {row['round']} {row['change']:32} {row['verdict']:26} {row.get('ratio') or 0:6.2f}x")
        print(f"{'left':40} {report.get('left')}")
        spent = [s["reason"] for s in report.get("skipped", []) if "budget" in s["reason"]]
        print(f"{'not run for the budget':40} {len(spent)}")
