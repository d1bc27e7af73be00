"""End to end through the real CLI: real tiny Keras runs on the CPU, both backends."""

import csv
import io
import json
import math

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

QUICK = [
    "--cpu",
    "--windows",
    "3",
    "--warmup-steps",
    "2",
    "--window-steps",
    "5",
    "--window-seconds",
    "0.3",
    "--batch-size",
    "64",
]


def bench_json(store, *args):
    result = run_cli("bench", *QUICK, *args, "--json", "--store", str(store))  # later options win
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_bench_mlp_on_the_cpu(store_path, backend):
    doc = bench_json(store_path, "mlp", "--backend", backend)
    (run,) = doc["runs"]
    assert (run["workload"], run["backend"], run["precision"], run["batch_size"], run["status"]) == (
        "mlp",
        backend,
        "fp32",
        64,
        "ok",
    )
    assert run["device"] == "cpu" and run["gpu"] is None
    t = run["throughput"]
    assert t["unit"] == "samples/s" and t["median"] > 0
    assert t["ci95_low"] <= t["median"] <= t["ci95_high"] and t["cv"] is not None
    assert len(run["windows"]) == 3 and all(w["steps"] >= 5 for w in run["windows"])
    # calibrated to the asked length (0.3 s); a quarter of it leaves room for a busy CI machine, and
    # still fails when windows fall back to the minimum steps (about 0.01 s for this model)
    assert all(w["seconds"] >= 0.3 * 0.25 for w in run["windows"])
    assert run["step_time_s"] == pytest.approx(64 / t["median"])
    assert run["epoch_time_s"] == pytest.approx(60_000 / t["median"])
    assert run["compile_s"] > 0 and run["loss"] > 0
    assert run["mfu"] is None and run["telemetry"] is None  # no GPU: nothing to compare against
    env = run["env"]
    assert env["framework"]["backend"] == backend and env["framework"]["keras_version"].startswith("3.")
    assert env["child_env"]["KERAS_BACKEND"] == backend and env["child_env"]["CUDA_VISIBLE_DEVICES"] == ""
    for key in (
        "gpuscout_version",
        "methodology_version",
        "python",
        "cpu_model",
        "cpu_count",
        "host_memory_bytes",
        "command_line",
    ):
        assert env[key] is not None, key
    assert run["spec"]["seed"] == 0 and run["id"]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_pipeline_mode_measures_input_waiting(store_path, backend):
    doc = bench_json(store_path, "mlp", "--backend", backend, "--data", "pipeline", "--pipeline-cost", "2")
    (run,) = doc["runs"]
    assert run["status"] == "ok" and run["data"] == "pipeline"
    assert 0.0 <= run["input_wait_share"] <= 1.0


def test_results_list_show_export(store_path, tmp_path):
    first = bench_json(store_path, "mlp", "--backend", "jax", "--repeats", "2")
    assert len(first["runs"]) == 2 and first["summaries"][0]["throughput"]["n"] == 2
    ids = [r["id"] for r in first["runs"]]

    listed = run_cli("results", "list", "--json", "--store", str(store_path))
    assert listed.returncode == 0
    assert sorted(r["id"] for r in json.loads(listed.stdout)["runs"]) == sorted(ids)

    shown = run_cli("results", "show", ids[0][:6], "--store", str(store_path))
    assert shown.returncode == 0 and ids[0] in shown.stdout and "jax" in shown.stdout

    exported = run_cli("results", "export", "--format", "csv", "--store", str(store_path))
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert all(float(r["throughput_median"]) > 0 and r["status"] == "ok" for r in rows)

    out = tmp_path / "all.json"
    assert run_cli("results", "export", "-o", str(out), "--store", str(store_path)).returncode == 0
    assert len(json.loads(out.read_text())["runs"]) == 2


def test_human_output_has_the_table_and_store_line(store_path):
    result = run_cli("bench", "mlp", "--backend", "jax", *QUICK, "--store", str(store_path))
    assert result.returncode == 0
    assert "gpuscout bench" in result.stdout and "samples/s" in result.stdout
    assert f"stored 1 run(s) in {store_path}" in result.stderr.replace("\n", "")


def test_token_workloads_report_tokens_per_second(store_path):
    doc = bench_json(
        store_path,
        "gpt2_small",
        "bert_base",
        "--backend",
        "jax",
        "--seq-len",
        "16",
        "--batch-size",
        "2",
        "--window-steps",
        "1",
        "--window-seconds",
        "0",
        "--warmup-steps",
        "0",
    )
    for run in doc["runs"]:
        assert run["status"] == "ok" and run["seq_len"] == 16 and run["unit"] == "tokens/s"
        assert run["throughput"]["median"] == pytest.approx(run["samples_per_s"] * 16)
        assert run["step_time_s"] == pytest.approx(2 / run["samples_per_s"])
        assert run["training_flops_per_sample"] > 0 and math.isfinite(run["loss"])


def test_vit_trains_on_the_cpu(store_path):
    doc = bench_json(
        store_path,
        "vit_b16",
        "--backend",
        "tensorflow",
        "--batch-size",
        "1",
        "--window-steps",
        "1",
        "--window-seconds",
        "0",
        "--warmup-steps",
        "0",
    )
    (run,) = doc["runs"]
    assert run["status"] == "ok" and run["unit"] == "images/s" and run["seq_len"] is None
