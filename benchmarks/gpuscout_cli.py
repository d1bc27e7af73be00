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
    done = subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    wall = time.monotonic() - began
    (out / f"{name}.json").write_text(done.stdout)
    (out / f"{name}.stderr.txt").write_text(done.stderr[-200_000:])
    print(f"-- {name}: exit {done.returncode} in {wall:.0f} s", flush=True)
    try:
        return json.loads(done.stdout), wall
    except ValueError:
        return None, wall
