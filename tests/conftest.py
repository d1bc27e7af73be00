"""Shared fixtures. GPU tests (marked `gpu`) run only where NVML reports a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _nvml_gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount()
    except Exception:
        return 0


# The modules whose tests take longest (each test tens of seconds to two minutes of real Keras
# children; measured with `pytest -n 2 --durations=0` on 2026-11-26): run first, so that the two
# workers end together instead of one idling while the other runs a two-minute test it took last.
LONGEST_FIRST = (
    "test_cli_tune_script.py",
    "test_cli_sweep_search.py",
    "test_notebook.py",
    "test_cli_tune.py",
    "test_cli_inference.py",
    "test_cli_user_model.py",
    "test_cli_devices.py",
    "test_benchmark_scripts.py",
    "test_cli_scale.py",
    "test_cli_bench_cpu.py",
    "test_cli_sweep.py",
    "test_cli_watch_edges.py",
    "test_cli_watch.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's own order kept
    if _nvml_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU (NVML found none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie runs nothing: it only waits for its parent to read it)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def store_path(tmp_path) -> Path:
    return tmp_path / "results.sqlite"


@pytest.fixture
def fake_gpu(tmp_path):
    """Write a fake-NVML config and return a function that updates it and gives its path."""
    path = tmp_path / "fake_nvml.json"

    def make(**gpu_overrides) -> Path:
        gpu = {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-fake-0",
            "memory_total_bytes": 85899345920,
            "compute_capability": [9, 0],
            "power_limit_w": 700,
            "sm_clock_max_mhz": 1980,
            "sm_clock_mhz": 1980,
            "utilization_pct": 98,
            "power_w": 600.0,
            "temperature_c": 60,
            "memory_used_bytes": 2 * 2**30,
            "clock_event_reasons": 0,
            "processes": [],
        }
        gpu.update(gpu_overrides)
        path.write_text(json.dumps({"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [gpu]}))
        return path

    return make


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the real `gpuscout` CLI in a fresh interpreter, as a user would (in `cwd` when given)."""
    full_env = dict(
        os.environ, COLUMNS="", PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
    )
    full_env.pop("GPUSCOUT_FAKE_NVML", None)
    full_env.pop("GPUSCOUT_WORKER", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuscout", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )


def fixture_json(script: str, *args: str, env: dict | None = None, timeout: float = 300) -> dict:
    """Run tests/fixtures/SCRIPT in a fresh interpreter (a framework set up its own way: Keras'
    backend, XLA's device count) and return the JSON of its last line of output."""
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    done = subprocess.run(
        [sys.executable, str(FIXTURES / script), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
