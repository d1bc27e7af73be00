"""The GPU benchmark scripts rehearsed on the CPU: a script broken by a change elsewhere (a method
it monkeypatches, a reader it imports, a mode it passes to the user script) fails here, not in a
call of the lent GPU machine's time (built_step.py's patch of a step whose signature had changed
failed every step_kernels run on the GPUs once). Their figures are only read on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SRC

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_step_kernels_and_the_user_script_benchmark_run_on_the_cpu(tmp_path):
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)}
    env.pop("XLA_FLAGS", None)
    kernels = subprocess.run([sys.executable, str(BENCHMARKS / "step_kernels.py"), "--out", str(tmp_path / "k"),
                              "--workload", "mlp", "--peer", "none", "--trace-steps", "2",  # mlp's own batch
                              "--budget-s", "200"], capture_output=True, text=True, env=env, timeout=300)
    assert kernels.returncode == 0, kernels.stderr[-3000:]
    side = json.loads((tmp_path / "k" / "summary.json").read_text())["gpuscout"]
    assert side is not None, (tmp_path / "k" / "gpuscout" / "stderr.txt").read_text()[-3000:]
    assert len(side["throughput"]["windows"]) == 5 and side["throughput"]["median"] > 0
    assert side["device"] == "cpu" and side["profile"]["steps"] == 2  # the trace was taken and read (no GPU kernels)
    assert (tmp_path / "k" / "gpuscout" / "step_after_optimizations.txt.gz").stat().st_size > 0

    # the user's script by hand, under watch, and under watch with a fake NVML, one round each
    script = subprocess.run([sys.executable, str(BENCHMARKS / "data_parallel_script.py"), "--out", str(tmp_path / "d"),
                             "--rounds", "1", "--parts", "hand", "--shape", "tiny", "--gpus", "1", "--fake-nvml"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert script.returncode == 0, script.stderr[-3000:]
    hand = json.loads((tmp_path / "d" / "summary.json").read_text())["hand"]
    assert set(hand) == {"one", "one_watched", "one_watched_fake_nvml"}  # --gpus 1: nothing spread
    assert all(len(hand[m]["windows"]) == 10 and hand[m]["median"] > 0 for m in hand)
    for mode in ("one_watched", "one_watched_fake_nvml"):
        assert hand[mode]["ratio_low"] <= hand[mode]["ratio"] <= hand[mode]["ratio_high"]
    assert "GPU-fake" in (tmp_path / "d" / "hand-one_watched_fake_nvml-0.log").read_text()  # watch read the fake
