import json
import math

import numpy as np
import pytest

from gpuscout.analysis.compare import compare, ratio_ci, significance, smallest_mann_whitney_p
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import BatchNormStats, Distribution
from gpuscout.record.run import RunRecord
from tests.conftest import FIXTURES

GOLDEN = [RunRecord.model_validate(r) for r in json.loads((FIXTURES / "results" / "golden.json").read_text())["runs"]]
GOLDEN_BY_ID = {r.id: r for r in GOLDEN}


def group(label, windows):
    """Windows, as tune's contrast tests them (compare's own test is between runs: test_gate.py)."""
    return list(windows)


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


def windows_at(logs):
    return [math.exp(x) for x in logs]


def test_exact_p_values_at_the_window_counts_gpuscout_uses():
    """Hand computations. Welch's t on log windows: n = 2 + 2 and 3 + 3 with equal spreads give
    whole degrees of freedom, where Student's t has a closed form; Mann-Whitney at 5 + 5 and 10 + 10
    fully apart gives its smallest p, 2 / C(n1 + n2, n1)."""
    # n = 2: log means 1.1 and 0.6, variances 0.02: se = sqrt(0.02/2 * 2), t = 0.5 / se = 3.5355, df = 2,
    # and for df = 2 the two-sided p is 1 - |t| / sqrt(2 + t^2)
    t = 0.5 / math.sqrt(0.02)
    different, p, test = significance(windows_at([1.0, 1.2]), windows_at([0.5, 0.7]))
    assert test == "welch-t" and p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9) and not different
    assert p == pytest.approx(0.07152, abs=1e-5)
    # n = 3: variances 0.01, se = sqrt(0.01/3 * 2), t = 6.1237, df = 4; p = I_x(2, 1/2) with
    # x = 4 / (4 + t^2) = 1 - 1.5 sqrt(1 - x) + 0.5 (1 - x)^1.5
    t = 0.5 / math.sqrt(0.02 / 3)
    x = 4 / (4 + t * t)
    different, p, test = significance(windows_at([1.0, 1.1, 1.2]), windows_at([0.5, 0.6, 0.7]))
    assert test == "welch-t" and different
    assert p == pytest.approx(1 - 1.5 * math.sqrt(1 - x) + 0.5 * (1 - x) ** 1.5, rel=1e-9)
    assert p == pytest.approx(0.003603, abs=1e-6)
    # n = 5 and 10, apart: Mann-Whitney, exact
    for n in (5, 10):
        different, p, test = significance(group("a", range(100, 100 + n)), group("b", range(50, 50 + n)))
        assert test == "mann-whitney" and different and p == pytest.approx(2 / math.comb(2 * n, n), rel=1e-9)
    assert smallest_mann_whitney_p(3, 3) == pytest.approx(0.1) and smallest_mann_whitney_p(4, 4) < 0.05


def test_three_windows_that_are_twice_apart_are_called_different():
    """The issue's case: TF 14.0 [9.7-15.7] vs JAX 6.8 [6.4-7.8] images/s over 3 windows each was
    "no significant difference" (Mann-Whitney cannot go below p = 0.1 at 3 + 3)."""
    different, p, test = significance(group("tf", [9.7, 14.0, 15.7]), group("jax", [6.4, 6.8, 7.8]))
    assert different and test == "welch-t" and p < 0.05


def test_with_one_window_the_verdict_says_no_test_could_tell():
    assert significance(group("a", [10.0]), group("b", [12.0, 12.1])) == (False, None, "too few windows")


def test_one_run_a_side_is_never_judged_by_its_windows():
    """Issue 75: two single runs were "2.355x, p=2.82e-07 (mann-whitney)" on their windows. Their
    windows share one process each; one run a side says it cannot tell, with no interval."""
    one = GOLDEN[0]
    other = one.model_copy(
        update={"id": "other", "windows": [w.model_copy(update={"throughput": 2 * w.throughput}) for w in one.windows]}
    )
    (c,) = compare([one, other], "run")
    assert c.basis == "windows"
    g = c.groups[1]
    assert g.verdict == "cannot tell" and g.test == "one run a side" and g.p_value is None
    assert g.ratio == pytest.approx(2.0) and g.ratio_low is None and g.ratio_high is None


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
    assert h100.ratio == pytest.approx(3002 / 1502) and h100.verdict == "cannot tell"
    assert base.runs == [pytest.approx(1502)] and (base.ci95_low, base.ci95_high) == (
        GOLDEN_BY_ID["a100bf16b256"].throughput.ci95_low,
        GOLDEN_BY_ID["a100bf16b256"].throughput.ci95_high,
    )


def test_groups_of_runs_are_their_geometric_mean_tested_between_runs():
    """Three runs a side, each with the golden run's windows scaled: the group's figure is the
    geometric mean of its runs, its interval the t interval between them, the ratio's test Welch's
    on the runs' logs (worked by hand in test_gate.py)."""
    seed = GOLDEN_BY_ID["a100bf16b256"]

    def at(run_id, gpu, scale):
        windows = [w.model_copy(update={"throughput": scale * w.throughput}) for w in seed.windows]
        return seed.model_copy(update={"id": run_id, "windows": windows, "gpu": GOLDEN_BY_ID[gpu].gpu})

    runs = [at(f"a{i}", "a100bf16b256", s) for i, s in enumerate((0.9, 1.0, 1.1))]
    runs += [at(f"h{i}", "h100bf16b256", s) for i, s in enumerate((1.8, 2.0, 2.2))]
    (c,) = compare(runs, "gpu")
    base, h100 = c.groups
    assert base.value == pytest.approx(1502 * (0.9 * 1.0 * 1.1) ** (1 / 3))
    logs = np.log([0.9 * 1502, 1502, 1.1 * 1502])
    half = 4.302653 * logs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2)
    assert (base.ci95_low, base.ci95_high) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    )
    assert h100.ratio == pytest.approx(2.0) and h100.test == "welch-t on 3+3 runs" and h100.verdict == "faster"
    assert h100.ratio_low < 2.0 < h100.ratio_high


def test_only_runs_differing_in_the_by_field_are_compared():
    comparisons = compare(GOLDEN, "precision")
    (c,) = comparisons  # bf16 vs fp32 on the H100 at batch 256; the A100 and batch 512 have no partner
    assert [g.label for g in c.groups] == ["fp32", "mixed_bfloat16"]
    assert c.groups[1].ratio == pytest.approx(3002 / 1200)


def test_methodology_versions_are_never_mixed_and_environments_are_named():
    runs = [r for r in GOLDEN if r.workload == "bert_base"]
    assert compare([runs[0], runs[1].model_copy(update={"methodology_version": 2})], "run") == []
    # (one run per version: nothing to compare within a version)
    env = runs[1].env.model_copy(
        update={"framework": runs[1].env.framework.model_copy(update={"backend_version": "0.5.0"})}
    )
    (c,) = compare([runs[0], runs[1].model_copy(update={"env": env})], "run")
    assert c.notes[1:] == ["runs differ in framework: 0.4.30, 0.5.0"] and "one run a side" in c.notes[0]
    assert c.groups[1].verdict == "cannot tell"


def test_bad_by_and_baseline():
    with pytest.raises(UsageError, match="unknown --by 'colour'"):
        compare(GOLDEN, "colour")
    with pytest.raises(UsageError, match="no comparison has a gpu 'T4'"):
        compare(GOLDEN, "gpu", baseline="T4")


def test_runs_with_per_gpu_and_global_batchnorm_are_never_pooled():
    def on_two(run_id, stats):
        r = next(r for r in GOLDEN if r.id == run_id)
        spec = r.spec.model_copy(
            update={"devices": 2, "distribution": Distribution.mirrored, "batchnorm": stats and BatchNormStats(stats)}
        )
        return r.model_copy(update={"id": f"{run_id}-{stats}", "devices": 2, "spec": spec})

    runs = [
        on_two("a100bf16b256", "per_replica"),
        on_two("h100bf16b256", "per_replica"),
        on_two("h100bf16b256", "global"),
    ]
    (c,) = compare(runs, "gpu")  # the global H100 run has no A100 partner: left out, not pooled
    assert c.held["batchnorm"] == "per_replica"
    assert [g.run_ids for g in c.groups] == [["a100bf16b256-per_replica"], ["h100bf16b256-per_replica"]]
    (c,) = compare(runs, "batchnorm")
    assert {g.label: g.run_ids for g in c.groups} == {
        "per_replica": ["h100bf16b256-per_replica"],
        "global": ["h100bf16b256-global"],
    }
    # a record written before the field existed: jax over several devices then ran Keras' DataParallel
    old = on_two("h100bf16b256", None)
    assert old.batchnorm == "global" and next(r for r in GOLDEN if r.id == "h100bf16b256").batchnorm is None


def test_watched_runs_that_trained_other_models_or_ran_elsewhere_are_said_to():
    """Issue 75: `compare RUN RUN` of two watched runs did not say they trained different models
    (6,530 and 5,418 parameters). The notes name it, and the machines where they differ."""
    from tests.records import fit_events, make_watch_record

    def watched(record_id, params, host):
        events = fit_events()
        events[1] = {**events[1], "params": params}
        record = make_watch_record(record_id, events)
        return record.model_copy(update={"env": record.env.model_copy(update={"hostname": host})})

    (c,) = compare([watched("watch0001", 6530, "ci-7"), watched("watch0002", 5418, "laptop")], "run")
    assert "runs differ in model (parameters): 5,418, 6,530" in c.notes
    assert "runs differ in host: ci-7, laptop" in c.notes
    (same,) = compare([watched("watch0001", 6530, "ci-7"), watched("watch0002", 6530, "ci-7")], "run")
    assert not any("model" in n or "host" in n for n in same.notes)


def test_a_watched_script_before_and_after_a_fix_is_grouped_by_its_command():
    """`compare --by command`: the runs of each command line one group, read by whole epochs
    where every run has them, tested run against run."""
    from tests.records import fit_events, make_watch_record

    def watched(record_id, command, window_s):
        record = make_watch_record(record_id, fit_events(windows=6, window_s=window_s))
        return record.model_copy(update={"command": command})

    runs = [watched(f"before{i:02d}", ["python", "train.py"], s) for i, s in enumerate((1.0, 1.02))]
    runs += [watched(f"after0{i:02d}", ["python", "train.py", "--prefetch"], s) for i, s in enumerate((0.5, 0.51))]
    (c,) = compare(runs, "command")
    assert [g.label for g in c.groups] == ["python train.py", "python train.py --prefetch"]
    assert [g.run_ids for g in c.groups] == [["before00", "before01"], ["after000", "after001"]]
    assert c.groups[1].test == "welch-t on 2+2 runs" and c.groups[1].ratio == pytest.approx(
        math.sqrt(1.0 * 1.02 / (0.5 * 0.51))
    )
    assert compare(GOLDEN, "command") == []  # benchmarks have no command line


def test_a_runs_interval_comes_from_the_windows_its_value_does_and_an_empty_run_is_left_out():
    """Issue 79.7: a record whose summary disagreed with its windows (an edited export, the summary's
    interval 1e297) was shown as 1.000 [1.1e297-8.8e297]: value and interval are both read from the
    windows now. A run of 0 samples/s windows has no place on a ratio's log scale: left out with a
    note, with no numpy warning on the way."""
    import warnings

    one = GOLDEN_BY_ID["a100bf16b256"]
    odd = one.model_copy(
        update={
            "id": "odd",
            "throughput": one.throughput.model_copy(update={"ci95_low": 1.1e297, "ci95_high": 8.8e297}),
        }
    )
    other = one.model_copy(update={"id": "other"})
    (c,) = compare([odd, other], "run")
    base = c.groups[0]
    assert base.ci95_low <= base.value <= base.ci95_high and base.ci95_high < 1e6
    empty = one.model_copy(
        update={"id": "empty", "windows": [w.model_copy(update={"throughput": 0.0}) for w in one.windows]}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (c,) = compare([odd, other, empty], "run")
    assert [g.label for g in c.groups] == ["odd", "other"]
    assert "left out, read as no throughput (0 images/s): run empty" in c.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare([odd, empty], "run") == []  # nothing left to compare it with
