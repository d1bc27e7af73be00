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


def test_auto_batch_is_scaled_to_this_gpu_and_its_estimate_holds(store_path):
    result = run_cli("bench", "resnet18_cifar", "--batch-size", "auto", "--precision", "mixed_bfloat16",
                     "--windows", "2", "--window-seconds", "0.5", "--json", "--store", str(store_path))
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    from gpuscout import sizing, workloads
    from gpuscout.spec import Precision

    expected = sizing.auto_batch_size(workloads.get("resnet18_cifar"), Precision.mixed_bfloat16, None,
                                      run["gpu"]["memory_total_bytes"])
    assert run["batch_size"] == expected
    assert run["peak_memory_bytes"] == pytest.approx(run["estimated_peak_memory_bytes"], rel=0.25)


def test_a_user_model_and_time_to_accuracy_on_the_gpu(store_path):
    from tests.conftest import FIXTURES

    result = run_cli("bench", "--model", f"{FIXTURES}/user_models/small_cnn.py:build", "--precision",
                     "mixed_bfloat16", "--windows", "2", "--window-seconds", "0.5", "--json", "--store", str(store_path))
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["spec"]["model_info"]["compute_dtype"] == "bfloat16"
    result = run_cli("bench", "mlp", "--to-accuracy", "0.9", "--dataset", "digits", "--batch-size", "64",
                     "--json", "--store", str(store_path))
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["time_to_accuracy"]["reached"]
