"""The typed record: fixtures round-trip, schema-1 records migrate, and every derived figure is
the hand computation (analysis/derive.py)."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
from pydantic import ValidationError

from gpuscout import workloads
from gpuscout.analysis.derive import RunContext, derive
from gpuscout.core.spec import DataMode, Precision, RunSpec
from gpuscout.record.child import ChildOutcome, ChildResult, ChildWindow, FrameworkInfo
from gpuscout.record.migrate import MigrationError, upgrade
from gpuscout.record.run import SCHEMA_VERSION, GpuInfo, RunRecord, Telemetry
from tests.conftest import FIXTURES

RESULTS = FIXTURES / "results"


def test_every_checked_in_record_round_trips_through_the_model():
    doc = json.loads((RESULTS / "golden.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    for raw in doc["runs"]:
        record = RunRecord.model_validate(raw)
        assert json.loads(record.model_dump_json()) == raw
        assert RunRecord.model_validate_json(record.model_dump_json()) == record


def _v1_records() -> list[dict]:
    with sqlite3.connect(RESULTS / "store_v1.sqlite") as db:
        return [json.loads(text) for (text,) in db.execute("SELECT record_json FROM runs")]


def test_real_schema_1_records_migrate_and_then_round_trip():
    stored = _v1_records()
    exported = json.loads((RESULTS / "export_v1.json").read_text())["runs"]
    assert len(stored) == len(exported) == 20
    for raw in stored + exported:
        record = RunRecord.model_validate(upgrade(raw, 1))
        assert RunRecord.model_validate_json(record.model_dump_json()) == record
        assert record.schema_version == SCHEMA_VERSION and record.kind == "benchmark"


def test_migration_moves_inference_fields_units_and_cost_keys():
    by_id = {r["id"]: r for r in _v1_records()}
    inference = next(r for r in by_id.values() if r.get("mode") == "inference")
    migrated = RunRecord.model_validate(upgrade(inference, 1))
    assert migrated.inference.format == inference["format"] and migrated.inference.variant == inference["variant"]
    assert migrated.inference.latency.p99_ms == inference["latency"]["p99_ms"]
    tokens = next(r for r in by_id.values() if r["workload"] == "gpt2_small")
    assert RunRecord.model_validate(upgrade(tokens, 1)).units_per_sample == tokens["seq_len"] == 16
    cost = {
        "hourly": {"usd_per_hour": 1.0, "basis": "b", "kind": "given"},
        "usd_per_million_images": 2.0,
        "kwh_per_million_images": 3.0,
        "usd_per_epoch": None,
        "usd_per_time_to_accuracy": None,
    }
    assert upgrade({"cost": cost}, 1)["cost"]["usd_per_million_units"] == 2.0
    with pytest.raises(MigrationError, match="newer"):
        upgrade({}, SCHEMA_VERSION + 1)


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("batch_size",), "big", "batch_size"),
        (("throughput", "median"), "fast", "throughput.median"),
        (("id",), ["a", "b"], "id"),
        (("throughput", "median"), float("nan"), "throughput.median"),
        (("samples_per_s",), float("inf"), "samples_per_s"),
    ],
)
def test_a_wrong_field_is_refused_naming_it(path, value, field):
    raw = json.loads((RESULTS / "golden.json").read_text())["runs"][0]
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as info:
        RunRecord.model_validate(raw)
    assert ".".join(map(str, info.value.errors()[0]["loc"])) == field


def test_a_non_finite_loss_is_data_not_a_bad_record():
    raw = json.loads((RESULTS / "golden.json").read_text())["runs"][0]
    raw["loss"] = float("nan")
    record = RunRecord.model_validate(raw)
    assert math.isnan(RunRecord.model_validate_json(record.model_dump_json()).loss)


def _ctx(**changes) -> RunContext:
    base = dict(
        gpus=[],
        environment={"gpuscout_version": "0.1.0", "methodology_version": 1, "schema_version": 2},
        child_env={"KERAS_BACKEND": "jax", "HOME": "/root"},
        group_id="g",
    )
    return RunContext(**{**base, **changes})


def _windows(seconds: list[float], samples: int, waits=None) -> list[ChildWindow]:
    out, start = [], 10.0
    for i, s in enumerate(seconds):
        out.append(
            ChildWindow(
                index=i,
                start_monotonic_s=start,
                end_monotonic_s=start + s,
                steps=10,
                samples=samples,
                input_wait_s=(waits or [0.0] * len(seconds))[i],
            )
        )
        start += s
    return out


def test_derived_figures_are_the_hand_computation():
    spec = RunSpec(
        workload="resnet50",
        backend="jax",
        precision="mixed_bfloat16",
        batch_size=256,
        gpu_index=0,
        data=DataMode.pipeline,
    )
    # three windows of 2560 samples in 1.0, 0.8 and 1.25 s: 2560, 3200 and 2048 images/s
    result = ChildResult(
        windows=_windows([1.0, 0.8, 1.25], 2560, waits=[0.1, 0.1, 0.1]),
        compile_s=5.0,
        warmup_s=1.0,
        steps_per_window=10,
        loss=6.5,
        fixed_step_loss=6.6,
        fixed_steps=21,
        peak_memory_bytes=2**30,
        framework=FrameworkInfo(backend="jax", platform="gpu"),
    )
    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", sm_clock_max_mhz=1980)
    (r,) = derive(spec, ChildOutcome("ok", result, duration_s=30.0), _ctx(gpus=[gpu]))
    w = workloads.get("resnet50")
    assert [x.throughput for x in r.windows] == pytest.approx([2560.0, 3200.0, 2048.0])
    assert r.throughput.median == r.samples_per_s == pytest.approx(2560.0)
    assert r.step_time_s == pytest.approx(256 / 2560) and r.units_per_sample == 1
    assert r.epoch_time_s == pytest.approx(w.reference_dataset_size / 2560)
    assert r.training_flops_per_sample == 3 * w.forward_flops(None)
    assert r.achieved_tflops == pytest.approx(3 * w.forward_flops(None) * 2560 / 1e12)
    assert r.mfu_peak_tflops == 989.5 and r.mfu_peak_path == "bf16"  # H100 SXM dense bf16, the catalog
    assert r.mfu == pytest.approx(r.achieved_tflops / r.mfu_peak_tflops)
    assert r.input_wait_share == pytest.approx(0.3 / 3.05)  # 0.3 s of 3.05 s waited for input
    assert {f.code for f in r.flags} == {"high_variance", "input_bound"}  # CV 22%, wait 9.8%
    assert r.gpu.catalog_id == "h100_sxm" and r.env.child_env == {"KERAS_BACKEND": "jax"}
    assert r.cost is not None and r.cost.usd_per_million_units == pytest.approx(
        r.cost.hourly.usd_per_hour / 3600 / 2560 * 1e6
    )


def test_tokens_throughput_counts_tokens_and_samples_are_sequences():
    spec = RunSpec(workload="gpt2_small", backend="jax", batch_size=4, seq_len=64)
    result = ChildResult(windows=_windows([1.0, 1.0, 1.0], 40), loss=5.0)
    (r,) = derive(spec, ChildOutcome("ok", result), _ctx())
    assert r.units_per_sample == 64 and r.unit == "tokens/s"
    assert r.throughput.median == pytest.approx(40 * 64) and r.samples_per_s == pytest.approx(40)
    assert r.window_rates() == pytest.approx([40.0, 40.0, 40.0])


def test_telemetry_is_summarised_over_the_windows_and_flags_throttling():
    spec = RunSpec(workload="mlp", backend="jax", batch_size=64, gpu_index=0)
    result = ChildResult(windows=_windows([1.0, 1.0, 1.0], 640))
    seen = {}

    def telemetry(windows, samples):
        seen.update(windows=len(windows), samples=samples)
        return [
            Telemetry(
                index=0,
                interval_s=0.1,
                sample_count=30,
                window_sample_count=30,
                power_mean_w=300.0,
                sm_clock_mean_mhz=1500.0,
                slowdown_reasons=["hw_slowdown"],
            )
        ]

    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", sm_clock_max_mhz=1980)
    (r,) = derive(spec, ChildOutcome("ok", result), _ctx(gpus=[gpu], telemetry=telemetry, other_pids=[42]))
    assert seen == {"windows": 3, "samples": 1920}
    assert r.telemetry.power_mean_w == 300.0 and r.telemetry_per_gpu is None
    assert [f.code for f in r.flags] == ["gpu_shared", "throttled"]


def test_a_failed_child_is_a_record_with_its_error_and_no_figures():
    spec = RunSpec(workload="mlp", backend="jax", batch_size=64)
    (r,) = derive(spec, ChildOutcome("oom", None, "out of memory", "RESOURCE_EXHAUSTED", 1, 3.0), _ctx())
    assert r.status == "oom" and r.error.message == "out of memory" and r.error.stderr_tail == "RESOURCE_EXHAUSTED"
    assert r.throughput is None and r.windows == [] and r.training_flops_per_sample > 0


def test_inference_makes_one_record_per_batch_size_with_forward_flops():
    from gpuscout.core.spec import Inference, Task

    spec = RunSpec(
        workload="mlp", backend="jax", batch_size=8, task=Task.infer, inference=Inference(batch_sizes=(1, 8))
    )
    points = [
        {
            "batch_size": b,
            "first_request_s": 0.5,
            "latencies_s": [0.001 * b] * 10,
            "windows": [w.model_dump() for w in _windows([0.01 * b] * 5, 2 * b)],
        }
        for b in (1, 8)
    ]
    result = ChildResult.model_validate(
        {
            "inference": {
                "points": points,
                "agreement": {"samples": 8, "max_abs_diff": 0.0, "mean_abs_diff": 0.0, "top1_agreement": 1.0},
                "server": {
                    "describe": "keras",
                    "device": "cpu",
                    "prepare_s": 0.1,
                    "format": "keras",
                    "variant": "fp32",
                },
            }
        }
    )
    records = derive(spec, ChildOutcome("ok", result), _ctx())
    assert [r.batch_size for r in records] == [1, 8] and all(r.mode == "inference" for r in records)
    w = workloads.get("mlp")
    one = records[0]
    assert one.samples_per_s == pytest.approx(2 / 0.01) and one.compile_s == 0.5
    assert one.inference.latency.p99_ms == pytest.approx(1.0) and one.inference.flops_per_sample == w.forward_flops(
        None
    )
    assert one.training_flops_per_sample is None and one.epoch_time_s is None
    assert one.achieved_tflops == pytest.approx(w.forward_flops(None) * 200 / 1e12)


def test_a_precision_that_breaks_training_is_flagged():
    spec = RunSpec(workload="mlp", backend="jax", batch_size=64, precision=Precision.mixed_float16)
    result = ChildResult(windows=_windows([1.0, 1.0, 1.0], 640), loss=float("nan"))
    (r,) = derive(spec, ChildOutcome("ok", result), _ctx())
    assert [f.code for f in r.flags] == ["loss_not_finite"] and math.isnan(r.loss)


def test_true_where_a_number_is_due_is_refused_and_a_flag_stays_a_flag():
    """Issue 79, item 9: pydantic's lax mode read an imported `"batch_size": true` as batch 1."""
    from tests.records import make_record

    fields = json.loads(make_record("t1").model_dump_json())
    for name in ("batch_size", "duration_s"):
        with pytest.raises(ValidationError, match=f"{name} should be a number, not true"):
            RunRecord.model_validate({**fields, name: True})
    assert RunRecord.model_validate({**fields, "batch_size": 64}).batch_size == 64
    assert RunRecord.model_validate({**fields, "xla": True}).xla is True  # a flag takes its bool
