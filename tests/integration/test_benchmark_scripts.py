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
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("XLA_FLAGS", None)
    kernels = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "step_kernels.py"),
            "--out",
            str(tmp_path / "k"),
            "--workload",
            "mlp",
            "--peer",
            "none",
            "--trace-steps",
            "2",  # mlp's own batch
            "--budget-s",
            "200",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert kernels.returncode == 0, kernels.stderr[-3000:]
    side = json.loads((tmp_path / "k" / "summary.json").read_text())["gpuscout"]
    assert side is not None, (tmp_path / "k" / "gpuscout" / "stderr.txt").read_text()[-3000:]
    assert len(side["throughput"]["windows"]) == 5 and side["throughput"]["median"] > 0
    assert side["device"] == "cpu" and side["profile"]["steps"] == 2  # the trace was taken and read (no GPU kernels)
    assert (tmp_path / "k" / "gpuscout" / "step_after_optimizations.txt.gz").stat().st_size > 0

    # the user's script by hand, under watch and with the instrumentation alone, one round each
    # (--fake-nvml's mode is watch with GPUSCOUT_FAKE_NVML set, which the watch tests use throughout)
    script = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "data_parallel_script.py"),
            "--out",
            str(tmp_path / "d"),
            "--rounds",
            "1",
            "--parts",
            "hand",
            "--shape",
            "tiny",
            "--gpus",
            "1",
            "--instrumented",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert script.returncode == 0, script.stderr[-3000:]
    hand = json.loads((tmp_path / "d" / "summary.json").read_text())["hand"]
    assert set(hand) == {"one", "one_watched", "one_instrumented"}  # --gpus 1: none spread
    assert all(len(hand[m]["windows"]) == 10 and hand[m]["median"] > 0 for m in hand)
    for mode in ("one_watched", "one_instrumented"):
        assert hand[mode]["ratio_low"] <= hand[mode]["ratio"] <= hand[mode]["ratio_high"]


def test_the_anatomy_of_a_traced_step_is_read_as_computed_by_hand(tmp_path):
    # data_parallel_script.py --parts anatomy reads jax's perfetto trace of the script's steps: two
    # steps by hand (times in us), the script's callback ending each; a GPU kernel of 6 ms a step
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("data_parallel_script", BENCHMARKS / "data_parallel_script.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    main, gpu = {"pid": 1, "tid": 7}, {"pid": 2, "tid": 3}
    events = [
        {"ph": "M", "name": "thread_name", **main, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", **gpu, "args": {"name": "Stream #13(compute)"}},
    ]
    for step in range(8):  # each 10 ms: the callback at 0, the step's call at 1 ms for 8 ms, a wait inside it
        t = step * 10_000
        events += [
            {"ph": "X", "name": "$dp_train.py:45 on_train_batch_end", "ts": t, "dur": 50, **main},
            {"ph": "X", "name": "$watch_fit.py:117 timed", "ts": t + 1_000, "dur": 8_000, **main},
            {"ph": "X", "name": "$watch_fit.py:63 wait_for", "ts": t + 2_000, "dur": 6_000, **main},
            {"ph": "X", "name": "fusion", "ts": t + 2_000, "dur": 6_000, **gpu},
        ]
    (tmp_path / "t").mkdir()
    with gzip.open(tmp_path / "t" / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    read = script.anatomy(tmp_path / "t", steps=8)
    assert read["main_thread"] == "python3"
    assert read["gpu_busy_ms_per_step"] == 6.0 and read["gpu_span_ms_per_step"] == (7 * 10 + 6) / 8
    assert read["gpu_gaps_over_100us_per_step"] == round(7 / 8, 2)  # 7 gaps of 4 ms between 8 kernels
    assert read["gpu_gap_ms_per_step_over_100us"] == 7 * 4 / 8
    by_name = {r["name"]: r for r in read["python"]}
    assert by_name["$watch_fit.py:117 timed"] == {
        "name": "$watch_fit.py:117 timed",
        "inclusive_ms": 8.0,
        "own_ms": 2.0,
        "calls": 1.0,
    }  # 8 ms less the 6 ms wait
    assert by_name["$watch_fit.py:63 wait_for"]["own_ms"] == 6.0
    host = read["one_step"]["host"]  # the 6th step, from its callback's start
    assert host == [
        (0.0, 0.05, "$dp_train.py:45 on_train_batch_end"),
        (1.0, 8.0, "$watch_fit.py:117 timed"),
        (2.0, 6.0, "$watch_fit.py:63 wait_for"),
    ]
    assert read["one_step"]["gpu_busy"] == [(2.0, 6.0)]
