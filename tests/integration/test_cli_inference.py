"""`gpuscout bench --mode inference` end to end on the CPU: every format CI has (Keras,
SavedModel, LiteRT fp32/fp16/int8, ONNX) on a small model trained on real data (the handwritten
digits gpuscout ships), the accuracy of each next to fp32 Keras, a load test with 4 clients, and bad input."""

import json

import pytest

from gpuscout.store import Store
from tests.conftest import run_cli

QUICK = ["--batch-sizes", "1,16", "--requests", "10", "--warmup-requests", "2"]


def test_every_format_with_its_accuracy_and_a_load_test(store_path):
    result = run_cli(
        "bench",
        "mlp",
        "--mode",
        "inference",
        "--cpu",
        "--backend",
        "tensorflow",
        "--model-format",
        "keras,saved_model,litert,onnx",
        "--litert-variants",
        "fp32,fp16,int8",
        "--dataset",
        "digits",
        "--concurrency",
        "4",
        "--load-seconds",
        "1",
        *QUICK,
        "--json",
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    by = {
        (r["inference"]["format"], r["inference"]["variant"], r["batch_size"]): r["inference"] | {"run": r}
        for r in runs
    }
    assert set(by) == {
        (f, v, b)
        for f, v in (
            ("keras", "fp32"),
            ("saved_model", "fp32"),
            ("litert", "fp32"),
            ("litert", "fp16"),
            ("litert", "int8"),
            ("onnx", "fp32"),
        )
        for b in (1, 16)
    }
    for r in runs:
        lat = r["inference"]["latency"]
        assert r["status"] == "ok" and r["mode"] == "inference" and lat["count"] == 10
        assert lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert r["samples_per_s"] == pytest.approx(r["throughput"]["median"])
        a = r["inference"]["agreement"]
        assert a["samples"] >= 256 and a["reference_accuracy"] > 0.85  # 5 epochs on digits: a real model
        # the same inputs through another format: the same predictions, and int8 within a few points
        assert abs(a["accuracy"] - a["reference_accuracy"]) <= (0.05 if r["inference"]["variant"] == "int8" else 0.01)
    assert by[("keras", "fp32", 1)]["agreement"]["max_abs_diff"] < 1e-4  # the model itself
    assert (
        by[("litert", "int8", 1)]["agreement"]["max_abs_diff"] > by[("litert", "fp32", 1)]["agreement"]["max_abs_diff"]
    )
    assert all(by[(f, "fp32", 1)]["serving"]["prepare_s"] > 0 for f in ("saved_model", "litert", "onnx"))
    assert (
        by[("litert", "int8", 16)]["serving"]["artifact_bytes"]
        < by[("litert", "fp32", 16)]["serving"]["artifact_bytes"]
    )
    load = by[("keras", "fp32", 1)]["load_test"]
    assert load["clients"] == 4 and load["requests"] > 4 and load["latency"]["count"] == load["requests"]
    assert by[("keras", "fp32", 16)]["load_test"] is None  # at the smallest batch only
    with Store(store_path) as store:
        assert store.count() == len(runs)
    compared = run_cli("compare", "--by", "format", "--workload", "mlp", "--store", str(store_path))
    assert compared.returncode == 0 and "litert:int8" in compared.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-sizes", "0,8"], "positive batch sizes"),
        (["--model-format", "tflite"], "unknown --model-format 'tflite'"),
        (["--model-format", "saved_model", "--precision", "mixed_bfloat16"], "exports the fp32 model"),
        (["--suite", "quick"], "--mode inference takes --batch-sizes"),
        (["--litert-variants", "int4", "--model-format", "litert"], "unknown LiteRT variant 'int4'"),
    ],
)
def test_bad_input_exits_2(store_path, args, message):
    result = run_cli(
        "bench",
        *(["mlp"] if "--suite" not in args else []),
        "--mode",
        "inference",
        "--cpu",
        "--backend",
        "tensorflow",
        *args,
        "--store",
        str(store_path),
    )
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not store_path.exists() or Store(store_path).count() == 0


def test_human_output_and_a_target_no_batch_meets(store_path):
    result = run_cli(
        "bench",
        "mlp",
        "--mode",
        "inference",
        "--cpu",
        "--backend",
        "jax",
        *QUICK,
        "--latency-target-ms",
        "0.000001",
        "--store",
        str(store_path),
        env={"COLUMNS": ""},
    )
    assert result.returncode == 1  # measured, and the target missed: a failed run, not bad input
    assert "keras jax fp32 infer" in result.stdout and "p99" in result.stdout  # the table was printed first
    assert "no batch size meets p99 <= 1e-06 ms for mlp (keras fp32): the lowest p99 was" in result.stderr
    with Store(store_path) as store:
        assert store.count() == 2  # what was measured is kept
