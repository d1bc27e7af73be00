"""On a real GPU (skipped elsewhere): the same end-to-end path as the CPU tests, plus telemetry."""

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.gpu


def test_bench_mlp_on_the_gpu_with_telemetry(store_path):
    result = run_cli("bench", "mlp", "--windows", "3", "--window-seconds", "0.5", "--json",
                     "--store", str(store_path))
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["status"] == "ok"
    assert run["telemetry"]["sample_count"] > 0 and run["peak_memory_bytes"] > 0
    assert run["env"]["framework"]["platform"] == "gpu"
