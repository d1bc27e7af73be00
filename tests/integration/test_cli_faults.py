"""Failing, hanging and interrupted children, and GPU telemetry, through the real CLI with a
fake worker (tests/fixtures/fake_worker.py) and a fake NVML."""

import json
import signal
import subprocess
import sys
import time

from gpuscout.store import Store
from tests.cli_checks import cli_env, gone_within, gpuscout


def test_oom_is_recorded_and_the_next_run_goes_on(tmp_path, store_path):
    result = gpuscout(
        ["bench", "mlp", "resnet18_cifar", "--cpu", "--backend", "jax", "--json", "--store", str(store_path)],
        cli_env(tmp_path),
    )
    assert result.returncode == 1
    runs = json.loads(result.stdout)["runs"]
    assert [r["status"] for r in runs] == ["oom", "ok"]
    assert "RESOURCE_EXHAUSTED" in runs[0]["error"]["stderr_tail"] and runs[0]["throughput"] is None
    # the record keeps what doctor --explain says about it: 1073741824 bytes = 1.00 GiB; gpuscout's
    # child ran with XLA_PYTHON_CLIENT_PREALLOCATE=false, so jax's preallocation is not blamed
    (explained,) = runs[0]["error"]["explanations"]
    assert explained["code"] == "gpu_oom_xla" and "the allocation that failed: 1.00 GiB" in explained["fix"]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in explained["fix"] and "lower the batch size" in explained["fix"]
    with Store(store_path) as store:
        assert sorted(r.status for r in store.list()) == ["ok", "oom"]
        stored = next(r for r in store.list() if r.status == "oom")
        assert stored.error.explanations[0].code == "gpu_oom_xla"
    # and the terminal shows it under the failure
    shown = gpuscout(["bench", "mlp", "--cpu", "--backend", "jax", "--store", str(store_path)], cli_env(tmp_path))
    tail = shown.stdout[shown.stdout.index("oom ") :]
    assert "what it means (gpuscout doctor --explain):" in tail and "1. out of GPU memory (XLA) [gpu_oom_xla]" in tail


def test_timeout_kills_the_group_and_is_recorded(tmp_path, store_path):
    result = gpuscout(
        ["bench", "resnet50", "--cpu", "--backend", "jax", "--timeout", "3", "--store", str(store_path)],
        cli_env(tmp_path),
    )
    assert result.returncode == 1 and "timeout" in result.stdout
    pids = list(map(int, (tmp_path / "pids").read_text().split()))
    assert gone_within(pids)
    with Store(store_path) as store:
        (record,) = store.list()
    assert record.status == "timeout"
    # where it was and what to change; and the record keeps the versions the child reported
    assert "while building and compiling the first step (a smaller --batch-size" in record.error.message
    assert record.env.framework is not None and record.env.framework.keras_version == "3"


def test_ctrl_c_leaves_no_child_and_no_record(tmp_path, store_path):
    # As a terminal starts it: a suite run as a background job inherits SIGINT ignored (POSIX, for
    # asynchronous commands without job control), and Python then installs no Ctrl-C handler.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscout",
            "bench",
            "resnet50",
            "--cpu",
            "--backend",
            "jax",
            "--store",
            str(store_path),
        ],
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    pid_file = tmp_path / "pids"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = list(map(int, pid_file.read_text().split()))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    assert gone_within(pids)
    with Store(store_path) as store:
        assert store.count() == 0


def test_gpu_run_records_telemetry_throttling_and_other_processes(tmp_path, store_path, fake_gpu):
    fake = fake_gpu(clock_event_reasons=0x40, sm_clock_mhz=1600, processes=[{"pid": 4242, "used_memory_bytes": 1}])
    result = gpuscout(
        ["bench", "resnet18_cifar", "--gpu", "0", "--backend", "jax", "--json", "--store", str(store_path)],
        cli_env(tmp_path, GPUSCOUT_FAKE_NVML=str(fake)),
    )
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["device"] == "gpu" and run["gpu"]["name"] == "NVIDIA H100 80GB HBM3"
    assert run["gpu"]["catalog_id"] == "h100_sxm" and run["mfu_peak_path"] == "tf32"
    assert run["mfu"] == run["achieved_tflops"] / 494.5
    t = run["telemetry"]
    assert t["window_sample_count"] >= 3 and t["power_mean_w"] == 600.0
    assert t["slowdown_reasons"] == ["hw_thermal_slowdown"]
    assert t["energy_j_per_1000_samples"] > 0
    codes = {f["code"] for f in run["flags"]}
    assert {"throttled", "gpu_shared"} <= codes
    assert run["env"]["driver_version"] == "550.54.15" and run["env"]["child_env"]["CUDA_VISIBLE_DEVICES"] == "0"
    # cost at the catalog's cheapest fresh H100 SXM price (Lambda, 3.78 USD/h of 2026-05; its 2.99 of
    # 2024-10 is stale)
    cost = run["cost"]
    assert cost["hourly"]["usd_per_hour"] == 3.78 and not cost["hourly"]["stale"]
    per_s = 3.78 / 3600
    assert cost["usd_per_million_units"] == per_s / run["throughput"]["median"] * 1e6 and run["unit"] == "images/s"
    assert cost["usd_per_epoch"] == per_s * run["epoch_time_s"]
    assert cost["kwh_per_million_units"] == 600.0 / run["throughput"]["median"] * 1e6 / 3.6e6


def test_an_owned_gpu_and_a_given_price_change_the_cost(tmp_path, store_path, fake_gpu):
    env = cli_env(tmp_path, GPUSCOUT_FAKE_NVML=str(fake_gpu()))
    given = gpuscout(
        [
            "bench",
            "resnet18_cifar",
            "--gpu",
            "0",
            "--backend",
            "jax",
            "--json",
            "--price",
            "7.2",
            "--store",
            str(store_path),
        ],
        env,
    )
    assert given.returncode == 0, given.stderr
    assert json.loads(given.stdout)["runs"][0]["cost"]["hourly"]["basis"] == "--price 7.2 USD/h"
    owned = gpuscout(
        ["bench", "resnet18_cifar", "--gpu", "0", "--backend", "jax", "--owned", "--store", str(store_path)], env
    )
    assert owned.returncode == 0  # no purchase price for an H100 in the catalog: no cost, no error
    bad = gpuscout(
        [
            "bench",
            "resnet18_cifar",
            "--gpu",
            "0",
            "--backend",
            "jax",
            "--provider",
            "azure",
            "--store",
            str(store_path),
        ],
        env,
    )
    assert bad.returncode == 2 and "no 'azure' price for h100_sxm" in bad.stderr


def test_no_telemetry_option(tmp_path, store_path, fake_gpu):
    fake = fake_gpu()
    result = gpuscout(
        [
            "bench",
            "resnet18_cifar",
            "--gpu",
            "0",
            "--backend",
            "jax",
            "--json",
            "--no-telemetry",
            "--store",
            str(store_path),
        ],
        cli_env(tmp_path, GPUSCOUT_FAKE_NVML=str(fake)),
    )
    (run,) = json.loads(result.stdout)["runs"]
    assert run["status"] == "ok" and run["telemetry"] is None and run["gpu"]["name"]


def test_quick_suite_runs_every_workload_small_and_short(tmp_path, store_path):
    result = gpuscout(
        [
            "bench",
            "--suite",
            "quick",
            "--cpu",
            "--backend",
            "jax",
            "--windows",
            "4",
            "--json",
            "--store",
            str(store_path),
        ],
        cli_env(tmp_path, FAKE_MODE="ok"),
    )
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert [r["workload"] for r in runs] == ["mlp", "resnet18_cifar", "resnet50", "vit_b16", "bert_base", "gpt2_small"]
    # a quarter of each default, and on the CPU no more than Keras fit's 32
    assert [r["batch_size"] for r in runs] == [32, 32, 32, 32, 32, 4]
    spec = runs[0]["spec"]
    assert (spec["warmup_steps"], spec["window_seconds"]) == (5, 1.0)  # the suite's
    assert spec["windows"] == 4  # an explicit option wins over the suite
