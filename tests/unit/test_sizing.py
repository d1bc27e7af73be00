import dataclasses
import re
from pathlib import Path

import pytest

from gpuscout import workloads
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision
from gpuscout.measure.plans import BenchOptions, plan
from gpuscout.telemetry.fake import FakeNvml
from gpuscout.telemetry.nvml import Nvml
from gpuscout.workloads import sizing
from gpuscout.workloads.suites import ALL

GIB = 2**30
BF16, FP32 = Precision.mixed_bfloat16, Precision.fp32
DOCS = Path(__file__).resolve().parents[2] / "docs" / "methodology.md"


def gpu_with(memory_gib: float) -> Nvml:
    return Nvml(
        FakeNvml(
            {
                "gpus": [
                    {
                        "name": "NVIDIA H200",
                        "compute_capability": [9, 0],
                        "processes": [],
                        "memory_total_bytes": int(memory_gib * GIB),
                    }
                ]
            }
        )
    )


def test_estimate_reproduces_the_measured_points():
    # Two of the allocator peaks the constants were fitted from (docs/benchmarks.md: H200, H100).
    resnet = workloads.get("resnet50")
    assert sizing.estimate_bytes(resnet, 256, BF16) / 10_960_988_160 == pytest.approx(1, abs=0.01)
    gpt2 = workloads.get("gpt2_small")
    assert sizing.estimate_bytes(gpt2, 8, FP32, 1024) / 20_153_802_752 == pytest.approx(1, abs=0.01)


def test_sequence_length_scales_the_activations_only():
    bert = workloads.get("bert_base")
    fixed = sizing.estimate_bytes(bert, 0, BF16, 128)
    at_128 = sizing.estimate_bytes(bert, 64, BF16, 128) - fixed
    at_512 = sizing.estimate_bytes(bert, 64, BF16, 512) - fixed
    assert at_512 == pytest.approx(4 * at_128)
    # measured at 512: 13.10 GB for batch 64 (H100, 2026-11-25)
    assert sizing.estimate_bytes(bert, 64, BF16, 512) / 13_099_179_520 == pytest.approx(1, abs=0.05)


def test_fp32_without_its_own_measurement_doubles_the_activations():
    w = workloads.get("resnet18_cifar")
    half = sizing.estimate_bytes(w, 100, BF16) - sizing.estimate_bytes(w, 0, BF16)
    full = sizing.estimate_bytes(w, 100, FP32) - sizing.estimate_bytes(w, 0, FP32)
    assert full == pytest.approx(2 * half)


def test_auto_scales_with_memory_and_never_exceeds_the_budget():
    vit = workloads.get("vit_b16")
    picks = [sizing.auto_batch_size(vit, BF16, None, gib * GIB) for gib in (8, 16, 48, 80, 141)]
    assert picks == sorted(picks) and picks[0] < vit.default_batch_size < picks[-1]
    assert picks[-1] <= sizing.AUTO_MAX_SCALE * vit.default_batch_size
    for gib, batch in zip((8, 16, 48, 80, 141), picks):
        assert sizing.estimate_bytes(vit, batch, BF16) <= sizing.AUTO_MEMORY_SHARE * gib * GIB
        # and the next power of two up would not have fitted (or hit the cap)
        assert (
            2 * batch > sizing.AUTO_MAX_SCALE * vit.default_batch_size
            or sizing.estimate_bytes(vit, 2 * batch, BF16) > sizing.AUTO_MEMORY_SHARE * gib * GIB
        )


def test_auto_without_a_gpu_is_the_default():
    w = workloads.get("resnet50")
    assert sizing.auto_batch_size(w, BF16, None, None) == w.default_batch_size
    assert sizing.fitting_batch(w, BF16, None, None) is None


def test_the_fitting_batch_is_the_budget_less_the_fixed_part_over_a_sample():
    """What `scale` says fits on the GPU: floor((0.8 x memory - fixed) / per sample), by the model's
    own two numbers; nothing for a workload without a memory model."""
    gpt2 = workloads.get("gpt2_small")
    fixed = sizing.estimate_bytes(gpt2, 0, BF16)
    per = sizing.estimate_bytes(gpt2, 1, BF16) - fixed
    memory = 150_000_000_000  # an H200's 139.7 GiB
    assert sizing.fitting_batch(gpt2, BF16, None, memory) == int((0.8 * memory - fixed) // per)
    assert sizing.estimate_bytes(gpt2, sizing.fitting_batch(gpt2, BF16, None, memory), BF16) <= 0.8 * memory
    assert sizing.fitting_batch(dataclasses.replace(gpt2, memory={}), BF16, None, memory) is None


def test_plan_resolves_auto_per_workload_on_the_gpu():
    specs, _ = plan(
        ["resnet50", "gpt2_small"],
        BenchOptions(backend="jax", batch_size="auto", precision="mixed_bfloat16"),
        gpu_with(16),
    )
    assert [s.batch_size for s in specs] == [256, 16]


def test_plan_refuses_a_run_that_clearly_cannot_fit_and_suggests_a_batch():
    options = BenchOptions(backend="jax", batch_size=512, precision="mixed_bfloat16")
    with pytest.raises(UsageError) as caught:
        plan(["gpt2_small"], options, gpu_with(80))
    message = str(caught.value)
    assert "gpt2_small at batch 512" in message and "GiB" in message
    suggested = int(re.search(r"--batch-size (\d+) or less", message).group(1))
    assert sizing.estimate_bytes(workloads.get("gpt2_small"), suggested, BF16) <= 80 * GIB


def test_plan_runs_what_may_fit_and_what_the_user_forces():
    # 1.0-1.25x the memory: not clear, so it runs (and is recorded as oom if it does not fit)
    borderline = BenchOptions(backend="jax", batch_size=150, precision="mixed_bfloat16")
    assert plan(["gpt2_small"], borderline, gpu_with(80))[0][0].batch_size == 150
    forced = BenchOptions(backend="jax", batch_size=512, precision="mixed_bfloat16", fit_check=False)
    assert plan(["gpt2_small"], forced, gpu_with(80))[0][0].batch_size == 512


def test_the_documented_auto_table_is_what_the_code_picks():
    text = DOCS.read_text()
    for row in sizing.auto_table(list(ALL)):
        cells = " | ".join(str(row[f"{g} GiB"]) for g in sizing.AUTO_TABLE_GIB)
        assert f"| {row['workload']} | {row['default']} | {cells} |" in text, row["workload"]
