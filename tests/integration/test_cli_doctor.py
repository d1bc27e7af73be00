"""`gpuscout doctor` through the real CLI; backends are probed for real (CPU builds here)."""

import json
import re

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_doctor_without_gpu_exits_zero_and_says_so():
    result = run_cli("doctor", "--json", env={"GPUSCOUT_FAKE_NVML": ""})
    doc = json.loads(result.stdout)
    if doc["gpus"]:
        pytest.skip("this machine has a GPU")
    assert result.returncode == 0
    assert {"python", "backends", "gpus", "checks"} <= set(doc)
    driver = next(c for c in doc["checks"] if c["name"] == "nvidia driver")
    assert driver["status"] == "warn" and "no NVIDIA GPU found" in driver["message"]
    by_name = {b["name"]: b for b in doc["backends"]}
    assert by_name["tensorflow"]["installed"] and by_name["jax"]["installed"]
    assert by_name["jax"]["xla_ok"] is True and by_name["tensorflow"]["xla_ok"] is True
    human = run_cli("doctor", env={"GPUSCOUT_FAKE_NVML": ""})
    assert human.returncode == 0 and "No NVIDIA GPU found" in human.stdout


def test_doctor_catches_cpu_only_builds_on_a_gpu_machine(fake_gpu):
    fake = fake_gpu(processes=[{"pid": 99, "used_memory_bytes": 1}])
    result = run_cli("doctor", "--json", env={"GPUSCOUT_FAKE_NVML": str(fake)})
    assert result.returncode == 1  # a failed check
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["tensorflow"]["status"] == "fail" and "CPU-only build" in checks["tensorflow"]["message"]
    assert "tensorflow[and-cuda]" in checks["tensorflow"]["fix"]
    assert checks["jax"]["status"] == "fail" and "jax[cuda12]" in checks["jax"]["fix"]
    assert checks["gpu 0 busy"]["status"] == "warn" and "99" in checks["gpu 0 busy"]["message"]
    assert "bf16" in checks["gpu 0"]["message"]


def test_doctor_table_keeps_bracketed_install_hints(fake_gpu):
    result = run_cli("doctor", env={"GPUSCOUT_FAKE_NVML": str(fake_gpu())})
    assert result.returncode == 1
    flat = re.sub(r"[\s│]", "", result.stdout)  # the table may wrap the fix column
    assert "tensorflow[and-cuda]" in flat
