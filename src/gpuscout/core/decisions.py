"""A sweep trial's pruner verdicts, from the driver to the trial's process (early_stop).

After each epoch (fit's end of epoch, or `gpuscout.sweep.report(..., step=n)`) the trial waits for
a file named for that point in the folder `GPUSCOUT_SWEEP_DECISIONS` names; the driver writes
`stop` or `go` there once Optuna's pruner has heard the metric. Standard library only: the
trial's side runs inside the user's script.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DECISIONS_ENV = "GPUSCOUT_SWEEP_DECISIONS"
# How long a trial waits for a verdict (the driver answers each at once; a driver gone answers
# never, and the trial goes on as if told to)
WAIT_S = 120.0
# Between looks for the verdict: from half a millisecond, doubling to 10 ms. The driver answers
# in about 0.3 ms (an Optuna report and the pruner's check), so a verdict is usually there at the
# first or second look; a fixed 10 ms cost 5-10 ms an epoch, a third of an epoch of
# examples/sweeps/train.py on 2 cores (docs/benchmarks.md, "A warm trial's seconds, taken apart").
POLL_FIRST_S, POLL_LAST_S = 0.0005, 0.01


def enabled() -> bool:
    return bool(os.environ.get(DECISIONS_ENV))


def wait_for(name: str) -> str:
    """`stop` or `go` for the point `name` (`1-3`: fit 1, epoch 3; `report-3`); `go` outside a
    sweep with early stopping, or when no verdict comes in WAIT_S."""
    folder = os.environ.get(DECISIONS_ENV)
    if not folder:
        return "go"
    path = os.path.join(folder, name)
    deadline = time.monotonic() + WAIT_S
    pause_s = POLL_FIRST_S
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or "go"
        except FileNotFoundError:
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, POLL_LAST_S)
    return "go"


def write(folder: Path, name: str, stop: bool) -> None:
    """The driver's verdict, whole (written aside, then renamed into place)."""
    aside = folder / f".{name}"
    aside.write_text("stop" if stop else "go")
    os.replace(aside, folder / name)
