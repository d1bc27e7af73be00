import json

import numpy as np
import pytest

from gpuscout.analysis.compare import compare, ratio_ci, significance, Group
from gpuscout.errors import UsageError
from gpuscout.record.run import RunRecord
from tests.conftest import FIXTURES

GOLDEN = [RunRecord.model_validate(r) for r in json.loads((FIXTURES / "results" / "golden.json").read_text())["runs"]]


def group(label, windows, ci=None):
    windows = list(windows)
    median = float(np.median(windows))
    low, high = ci or (min(windows), max(windows))
    return Group(label, [label], windows, median, low, high)


def test_samples_from_the_same_distribution_are_not_called_different():
    rng = np.random.default_rng(1)
    a, b = group("a", rng.normal(1000, 10, 10)), group("b", rng.normal(1000, 10, 10))
    different, p, test = significance(a, b)
    assert test == "mann-whitney" and not different and p > 0.05


def test_clearly_different_samples_are_called_different():
    rng = np.random.default_rng(2)
    a, b = group("a", rng.normal(1050, 10, 10)), group("b", rng.normal(1000, 10, 10))
    different, p, test = significance(a, b)
    assert different and p < 0.001


def test_with_too_few_windows_the_intervals_decide():
    apart = significance(group("a", [10.0, 10.2], ci=(9.9, 10.3)), group("b", [12.0, 12.1], ci=(11.9, 12.2)))
    overlapping = significance(group("a", [10.0, 10.2], ci=(9.9, 10.3)), group("b", [10.1, 10.4], ci=(10.0, 10.5)))
    assert apart == (True, None, "ci-overlap") and overlapping == (False, None, "ci-overlap")


def test_the_ratio_interval_holds_the_ratio():
    rng = np.random.default_rng(3)
    a, b = list(rng.normal(2000, 20, 20)), list(rng.normal(1000, 10, 20))
    low, high = ratio_ci(a, b)
    assert low < np.median(a) / np.median(b) < high and 1.9 < low and high < 2.1


def test_compare_by_gpu_on_the_golden_runs():
    (c,) = compare(GOLDEN, "gpu")
    assert c.workload == "resnet50" and c.held["precision"] == "mixed_bfloat16" and c.held["batch_size"] == 256
    base, h100 = c.groups
    assert base.label == "NVIDIA A100-SXM4-80GB" and base.verdict == "baseline"
    assert h100.ratio == pytest.approx(3002 / 1502) and h100.verdict == "faster"
    assert h100.ratio_low < h100.ratio < h100.ratio_high


def test_only_runs_differing_in_the_by_field_are_compared():
    comparisons = compare(GOLDEN, "precision")
    (c,) = comparisons  # bf16 vs fp32 on the H100 at batch 256; the A100 and batch 512 have no partner
    assert [g.label for g in c.groups] == ["fp32", "mixed_bfloat16"]
    assert c.groups[1].ratio == pytest.approx(3002 / 1200)


def test_methodology_versions_are_never_mixed_and_environments_are_named():
    runs = [r for r in GOLDEN if r.workload == "bert_base"]
    assert compare([runs[0], runs[1].model_copy(update={"methodology_version": 2})], "run") == []
    # (one run per version: nothing to compare within a version)
    env = runs[1].env.model_copy(update={"framework": runs[1].env.framework.model_copy(
        update={"backend_version": "0.5.0"})})
    (c,) = compare([runs[0], runs[1].model_copy(update={"env": env})], "run")
    assert c.notes == ["runs differ in framework: 0.4.30, 0.5.0"]
    assert c.groups[1].verdict == "no significant difference"


def test_bad_by_and_baseline():
    with pytest.raises(UsageError, match="unknown --by 'colour'"):
        compare(GOLDEN, "colour")
    with pytest.raises(UsageError, match="no comparison has a gpu 'T4'"):
        compare(GOLDEN, "gpu", baseline="T4")
