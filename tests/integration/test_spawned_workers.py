"""tune's worker processes for a PyDataset (gpuscout/child/spawned_workers.py, issue 77): new
interpreters, never forked from a process that started JAX, driven by a real Keras fit on the jax
backend (tests/fixtures/child/spawned.py), and gone with the process that started them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import FIXTURES, SRC
from tests.integration.test_cli_kills import gone_within

SCRIPT = FIXTURES / "child" / "spawned.py"
ENV = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(SRC)}


def test_the_batches_are_the_datasets_own_in_keras_order_and_errors_come_back_as_raised():
    ran = subprocess.run([sys.executable, str(SCRIPT), "check"], env=ENV, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    # each batch what the dataset itself makes: its dict, its empty array, its list, each dtype
    assert seen["first_epoch"] and seen["reshuffled"]
    # the order the script's on_epoch_end drew in this process, sent to the workers
    assert seen["after_epoch_end"]
    assert seen["error"] == "batch 99 does not exist"  # the dataset's own exception, its own type
    assert seen["refused"].startswith("SpawnedWorkers: the dataset's lock cannot be sent to a process")
    assert seen["epochs"] == 2  # a real fit, through Keras' own threads and shuffle
    assert gone_within(seen["pids"], 30)  # the processes end with the script


def test_the_workers_end_when_the_script_is_killed():
    holder = subprocess.Popen([sys.executable, str(SCRIPT), "hold"], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(holder.stdout.readline())["pids"]
        os.kill(holder.pid, signal.SIGKILL)  # no finaliser runs: the workers' end is their own
        holder.wait(timeout=60)
        assert gone_within(pids, 30), "a worker process outlived the script killed with SIGKILL"
    finally:
        holder.kill()
        holder.wait(timeout=60)
