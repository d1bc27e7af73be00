"""On a real GPU (skipped elsewhere): the same end-to-end path as the CPU tests, plus telemetry."""

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.gpu


def test_bench_mlp_on_the_gpu_with_telemetry(store_path):
    result = run_cli("bench", "mlp", "--windows", "3", "--window-seconds", "0.5", "--json", "--store", str(store_path))
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["status"] == "ok"
    assert run["telemetry"]["sample_count"] > 0 and run["peak_memory_bytes"] > 0
    assert run["env"]["framework"]["platform"] == "gpu"


def test_auto_batch_is_scaled_to_this_gpu_and_its_estimate_holds(store_path):
    result = run_cli(
        "bench",
        "resnet18_cifar",
        "--batch-size",
        "auto",
        "--precision",
        "mixed_bfloat16",
        "--windows",
        "2",
        "--window-seconds",
        "0.5",
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    from gpuscout import workloads
    from gpuscout.core.spec import Precision
    from gpuscout.workloads import sizing

    expected = sizing.auto_batch_size(
        workloads.get("resnet18_cifar"), Precision.mixed_bfloat16, None, run["gpu"]["memory_total_bytes"]
    )
    assert run["batch_size"] == expected
    assert run["peak_memory_bytes"] == pytest.approx(run["estimated_peak_memory_bytes"], rel=0.25)


def test_a_user_model_and_time_to_accuracy_on_the_gpu(store_path):
    from tests.conftest import FIXTURES

    result = run_cli(
        "bench",
        "--model",
        f"{FIXTURES}/user_models/small_cnn.py:build",
        "--precision",
        "mixed_bfloat16",
        "--windows",
        "2",
        "--window-seconds",
        "0.5",
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["spec"]["model_info"]["compute_dtype"] == "bfloat16"
    result = run_cli(
        "bench",
        "mlp",
        "--to-accuracy",
        "0.9",
        "--dataset",
        "digits",
        "--batch-size",
        "64",
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["time_to_accuracy"]["reached"]


def test_inference_on_the_gpu_chooses_how_each_batch_reaches_it(store_path):
    result = run_cli(
        "bench",
        "mlp",
        "--mode",
        "inference",
        "--backend",
        "jax",
        "--batch-sizes",
        "1,512",
        "--requests",
        "30",
        "--warmup-requests",
        "5",
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert [r["batch_size"] for r in runs] == [1, 512]
    for run in runs:
        assert run["device"] == "gpu" and run["status"] == "ok"
        path = run["inference"]["input_path"]
        assert set(path["copy_ms"]) == ({"direct", "pinned"} | ({"split4"} if run["batch_size"] >= 4 else set()))
        assert path["method"] == min(path["copy_ms"], key=path["copy_ms"].get)
        assert run["inference"]["latency"]["p50_ms"] <= run["inference"]["latency"]["p99_ms"]
        assert run["inference"]["agreement"]["top1_agreement"] == 1.0  # fp32 served against fp32


def _gpu_count() -> int:
    from tests.conftest import _nvml_gpu_count

    return _nvml_gpu_count()


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
def test_scale_over_two_gpus_with_topology_and_per_gpu_telemetry(store_path):
    result = run_cli(
        "scale",
        "mlp",
        "--gpu-counts",
        "1,2",
        "--backend",
        "jax",
        "--windows",
        "3",
        "--window-seconds",
        "0.5",
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["interconnect"]["kind"] in ("NVLink", "PCIe") and report["topology"]
    two = next(p for p in report["points"] if p["devices"] == 2)
    assert [g["index"] for g in two["per_gpu"]] == [0, 1] and all(g["power_mean_w"] for g in two["per_gpu"])
    assert two["efficiency"]["value"] == pytest.approx(two["speedup"]["ratio"] / 2)
    assert two["all_reduce"] == "XLA all-reduce (NCCL on GPUs)"
    # the compiled program's collectives, read back on GPUs too (the CPU's test checks the bytes by hand)
    assert two["collectives"].startswith("as compiled, ") and "as compiled" in report["verdict"]["summary"]
