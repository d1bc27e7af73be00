"""gpuscout killed with kill -9: no child or grandchild outlives it, its temporary folders are
swept up by the next run."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from tests.conftest import FIXTURES, SRC

FAKE_WORKER = f"{sys.executable} {FIXTURES / 'fake_worker.py'}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waits for its parent to read it: it runs nothing
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def gpuscout(*args: str, env: dict, log: Path) -> subprocess.Popen:
    """gpuscout started in the background, its output appended to `log` (a pipe nobody reads
    while waiting would fill and stall it)."""
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, "-m", "gpuscout", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)


def base_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200", GPUSCOUT_STORE=str(tmp_path / "s.sqlite"), **extra)
    env.pop("GPUSCOUT_FAKE_NVML", None)
    return env


def test_kill_9_of_bench_takes_its_child_and_grandchild_along(tmp_path):
    pids_file = tmp_path / "pids"
    env = base_env(tmp_path, GPUSCOUT_WORKER=FAKE_WORKER, FAKE_PIDS=str(pids_file))
    log = tmp_path / "bench.log"
    parent = gpuscout("bench", "resnet50", "--cpu", "--timeout", "300", env=env, log=log)  # the fake worker hangs
    deadline = time.monotonic() + 60
    while not (pids_file.exists() and pids_file.read_text().strip()):
        assert time.monotonic() < deadline and parent.poll() is None, log.read_text()
        time.sleep(0.05)
    child, grandchild = map(int, pids_file.read_text().split())
    left = glob.glob(f"{tempfile.gettempdir()}/gpuscout-run-{parent.pid}-*")
    assert left  # the run's folder, which a kill -9 cannot clean up
    parent.kill()
    parent.wait()
    assert gone_within([child, grandchild], 2.0), "a child outlived gpuscout"
    # the next gpuscout run sweeps up the folder the killed one left
    after = subprocess.run([sys.executable, "-m", "gpuscout", "bench", "mlp", "--cpu"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert after.returncode == 1 and "oom" in after.stdout  # the fake worker's mlp runs out of memory
    assert not any(os.path.exists(p) for p in left)
