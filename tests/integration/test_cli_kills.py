"""gpuscout killed with kill -9: no child or grandchild outlives it, its temporary folders are
swept up by the next run, and a sweep resumed after its driver died runs every trial exactly
once to completion (counted by the trials' own side effects), each result from one attempt."""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.cli_checks import FAKE_WORKER, gone_within
from tests.conftest import SRC, alive


def gpuscout(*args: str, env: dict, log: Path) -> subprocess.Popen:
    """gpuscout started in the background, its output appended to `log` (a pipe nobody reads
    while waiting would fill and stall it)."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuscout", *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def base_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="", GPUSCOUT_STORE=str(tmp_path / "s.sqlite"), **extra)
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
    after = subprocess.run(
        [sys.executable, "-m", "gpuscout", "bench", "mlp", "--cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert after.returncode == 1 and "oom" in after.stdout  # the fake worker's mlp runs out of memory
    assert not any(os.path.exists(p) for p in left)


TRIAL = """import json, os, sys, time
x = int(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "started.log"), "a") as log:
    log.write(f"{x} {os.getpid()}\\n")
time.sleep(float(sys.argv[2]) * (1 + x % 3))
print(json.dumps({"m": x, "pid": os.getpid()}), flush=True)
with open(os.path.join(here, "done.log"), "a") as log:  # the trial's side effect: its last act
    log.write(f"{x}\\n")
os._exit(0)
"""


def sweep_project(tmp_path: Path, trials: int, sleep_s: float) -> Path:
    (tmp_path / "trial.py").write_text(TRIAL)
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"name: soak\ncommand: {sys.executable} {tmp_path / 'trial.py'} {{x}} {sleep_s}\n"
        f"reports: [m]\nmetric: {{name: m, direction: max}}\nspace:\n  x: {list(range(trials))}\n"
        "max_consecutive_failures: 1000\n"
    )
    return path


def check_exactly_once(tmp_path: Path, trials: int) -> None:
    done = (tmp_path / "done.log").read_text().split()
    assert sorted(map(int, done)) == list(range(trials)), "a trial ran twice or never"
    started = [int(line.split()[1]) for line in (tmp_path / "started.log").read_text().splitlines()]
    assert not [p for p in started if alive(p)], "a trial process outlived its driver"
    with Store(tmp_path / "s.sqlite", create=False) as store:
        stored = [t.model_dump() for t in store.trials("soak")]
    assert len(stored) == trials and {t["status"] for t in stored} == {"ok"}
    for t in stored:  # each result from one attempt: its own value, one report
        assert t["result"]["metrics"]["m"] == t["params"]["x"] and len(t["result"]["history"]) == 1


def test_kill_9_of_a_sweep_driver_then_resume_runs_every_trial_once(tmp_path):
    path = sweep_project(tmp_path, trials=8, sleep_s=0.4)
    env = base_env(tmp_path)
    log = tmp_path / "driver.log"
    driver = gpuscout("sweep", str(path), "--cpu-slots", "2", "--resume", env=env, log=log)
    deadline = time.monotonic() + 60
    while not (tmp_path / "done.log").exists() or len((tmp_path / "done.log").read_text().split()) < 3:
        assert time.monotonic() < deadline and driver.poll() is None, log.read_text()
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    running = [int(line.split()[1]) for line in (tmp_path / "started.log").read_text().splitlines()]
    assert gone_within(running, 2.0), "a trial outlived its driver"
    resumed = subprocess.run(
        [sys.executable, "-m", "gpuscout", "sweep", str(path), "--cpu-slots", "2", "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    check_exactly_once(tmp_path, 8)


def lines(path: Path) -> int:
    return len(path.read_text().split("\n")) - 1 if path.exists() else 0


def test_soak_200_trials_with_random_kills_of_the_driver(tmp_path):
    """200 short trials over 4 CPU slots; the driver is killed at random moments and resumed until
    the sweep is done: 0 duplicates, 0 lost, 0 orphans.

    Each kill comes a random time after the round's driver finished its first trial, not a random
    time after its start: on a loaded machine the start-up alone can outlast a fixed delay, and
    the soak then measures the machine (CI once saw 60 rounds pass without the sweep ending)."""
    path = sweep_project(tmp_path, trials=200, sleep_s=0.05)
    env = base_env(tmp_path)
    rng = random.Random(18)
    log, done = tmp_path / "driver.log", tmp_path / "done.log"
    kills, progress = 0, []
    while True:
        before = lines(done)
        driver = gpuscout("sweep", str(path), "--cpu-slots", "4", "--resume", env=env, log=log)
        if before < 200:  # trials are left: wait for one of this driver's trials to end, then kill it soon after
            deadline = time.monotonic() + 120
            while lines(done) == before and driver.poll() is None:
                assert time.monotonic() < deadline, (
                    f"a resumed driver ended no trial in 120 s:\n{log.read_text()[-3000:]}"
                )
                time.sleep(0.01)
            try:
                driver.wait(timeout=rng.uniform(0.0, 1.5))
            except subprocess.TimeoutExpired:
                driver.send_signal(signal.SIGKILL)
                driver.wait()
                kills += 1
                progress.append(lines(done) - before)
                continue
        driver.wait(timeout=300)  # left to finish its summary
        assert driver.returncode == 0, log.read_text()[-3000:]
        break
    assert kills >= 3, progress  # the soak killed the driver several times on the way
    check_exactly_once(tmp_path, 200)


LINGERING_TRIAL = """import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "started.log"), "a") as log:
    log.write(f"{sys.argv[1]} {os.getpid()}\\n")
if sys.argv[2] == "work":
    time.sleep(60)


# says it has begun (what the test waits for, not a time), then outlasts the trial's code; its names
# are its defaults: a finaliser runs when the module's globals may be gone
def linger(open=open, marker=os.path.join(here, "lingering.log"), sleep=time.sleep):
    with open(marker, "a") as log:
        log.write("lingering\\n")
    sleep(60)


class Linger:  # the interpreter's shutdown outlasts the trial's code (a framework's finalisers)
    def __del__(self, linger=linger):
        linger()


if sys.argv[2] == "atexit":  # the script's own exit handler outlasts its code (a logger's flush, an upload)
    import atexit
    atexit.register(linger)
else:
    keep = Linger()
print(json.dumps({"m": int(sys.argv[1])}), flush=True)
with open(os.path.join(here, "done.log"), "a") as log:
    log.write(f"{sys.argv[1]}\\n")
"""


def _lingering_sweep(tmp_path: Path, phase: str) -> Path:
    (tmp_path / "trial.py").write_text(LINGERING_TRIAL)
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"name: soak\ncommand: {sys.executable} {tmp_path / 'trial.py'} {{x}} {phase}\n"
        "reports: [m]\nmetric: {name: m}\nspace:\n  x: [7]\n"
    )
    return path


def _wait_for(path: Path, driver: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline and driver.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)


def _dry_run(path: Path, env: dict) -> str:
    listed = subprocess.run(
        [sys.executable, "-m", "gpuscout", "sweep", str(path), "--cpu-slots", "1", "--dry-run", "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill-9", "sigterm", "ctrl-c"])
def test_a_driver_stopped_after_a_trials_code_ran_never_runs_it_again(sig, tmp_path):
    """Issue 44, item 2: the trial's code has all run (its metric printed, its side effect done)
    and its interpreter is still shutting down when the driver is stopped. It is finished: the
    driver that handles the signal stores it so; after kill -9 `--dry-run` says so and `--resume`
    takes it from its files; never run twice."""
    path = _lingering_sweep(tmp_path, "done")
    env, log = base_env(tmp_path), tmp_path / "driver.log"
    driver = gpuscout("sweep", str(path), "--cpu-slots", "1", env=env, log=log)
    _wait_for(tmp_path / "lingering.log", driver, log)  # its atexit handlers ran; the shutdown lingers 60 s
    driver.send_signal(sig)
    assert driver.wait(timeout=60) == {signal.SIGKILL: -9, signal.SIGTERM: 143, signal.SIGINT: 130}[sig]
    ((_, pid),) = [line.split() for line in (tmp_path / "started.log").read_text().splitlines()]
    assert gone_within([int(pid)], 5.0), "the trial outlived its driver"
    if sig == signal.SIGKILL:
        assert "(ok: it finished as its driver ended; taken from its files, not run again)" in _dry_run(path, env)
        resumed = subprocess.run(
            [sys.executable, "-m", "gpuscout", "sweep", str(path), "--cpu-slots", "1", "--resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store(tmp_path / "s.sqlite", create=False) as store:
        (trial,) = [t.model_dump() for t in store.trials("soak")]
        assert store.leases("soak") == {}
    assert trial["status"] == "ok" and trial["result"]["metrics"] == {"m": 7}
    # forked from the sweep's warm interpreter (executor/warm.py); one taken from its files says nothing
    assert trial["result"]["warm"] == (sig != signal.SIGKILL)
    assert "all of its code had run when its driver stopped" in trial["result"]["message"]
    assert len((tmp_path / "started.log").read_text().splitlines()) == 1  # run once
    assert "(ok)" in _dry_run(path, env)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_driver_stopped_while_a_trials_own_exit_handler_runs_never_runs_it_again(sig, tmp_path):
    """Issue 59, item 4: the trial's code has all run and reported, and its own atexit handler is
    running (it would for a minute) when the driver is stopped. It is finished: stored once, with a
    message that it was stopped during its exit; never run again by `--resume`."""
    path = _lingering_sweep(tmp_path, "atexit")
    env, log = base_env(tmp_path), tmp_path / "driver.log"
    driver = gpuscout("sweep", str(path), "--cpu-slots", "1", env=env, log=log)
    _wait_for(tmp_path / "lingering.log", driver, log)  # in its atexit handler
    driver.send_signal(sig)
    assert driver.wait(timeout=60) == {signal.SIGKILL: -9, signal.SIGTERM: 143}[sig]
    ((_, pid),) = [line.split() for line in (tmp_path / "started.log").read_text().splitlines()]
    assert gone_within([int(pid)], 5.0), "the trial outlived its driver"
    if sig == signal.SIGKILL:
        resumed = subprocess.run(
            [sys.executable, "-m", "gpuscout", "sweep", str(path), "--cpu-slots", "1", "--resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store(tmp_path / "s.sqlite", create=False) as store:
        (trial,) = [t.model_dump() for t in store.trials("soak")]
    assert trial["status"] == "ok" and trial["result"]["metrics"] == {"m": 7}
    assert "during its exit (its atexit handlers" in trial["result"]["message"], trial["result"]["message"]
    assert len((tmp_path / "started.log").read_text().splitlines()) == 1  # run once


def test_ctrl_c_leaves_each_trial_said_interrupted_and_no_lease(tmp_path):
    """A trial still working when Ctrl-C comes is stored `interrupted` with its lease gone at
    once (not `running` until a resume), and `--dry-run` says it runs again."""
    path = _lingering_sweep(tmp_path, "work")
    env, log = base_env(tmp_path), tmp_path / "driver.log"
    driver = gpuscout("sweep", str(path), "--cpu-slots", "1", env=env, log=log)
    _wait_for(tmp_path / "started.log", driver, log)
    driver.send_signal(signal.SIGINT)
    time.sleep(0.3)
    driver.send_signal(signal.SIGINT)  # a second Ctrl-C while it stops its trials
    assert driver.wait(timeout=60) == 130, log.read_text()[-3000:]
    with Store(tmp_path / "s.sqlite", create=False) as store:
        (trial,) = [t.model_dump() for t in store.trials("soak")]
        assert store.leases("soak") == {}
    assert trial["status"] == "interrupted"
    assert "(interrupted: runs again)" in _dry_run(path, env)
