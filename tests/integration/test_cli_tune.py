"""`gpuscout tune` through the real CLI: the batch search against a fake worker that runs out of
memory above a threshold, the ablation on the CPU (tensorflow backend, a tiny model), and the
input-bound verdict on pipelines made slow and fast on purpose."""

import json
import sqlite3
import sys

import psutil
import pytest

from gpuscout.core.spec import Backend
from gpuscout.tune.advice import recommendations
from gpuscout.tune.input import classify_wait
from gpuscout.tune.workload_results import AblationRow, BatchSearch, WorkloadTuneReport
from tests.conftest import FIXTURES, run_cli

PIPELINES = FIXTURES / "pipelines" / "pipelines.py"
QUICK = ("--windows", "2", "--window-seconds", "0.1", "--warmup-steps", "1")
pytestmark = pytest.mark.slow


def test_the_batch_search_finds_the_largest_batch_that_fits_exactly(tmp_path, store_path):
    env = {
        "GPUSCOUT_WORKER": f"{sys.executable} {FIXTURES / 'fake_worker.py'}",
        "FAKE_OOM_ABOVE": "300",
        "FAKE_PIDS": str(tmp_path / "pids"),
    }
    proc = run_cli(
        "tune",
        "resnet18_cifar",
        "--parts",
        "batch",
        "--batch-size",
        "64",
        "--max-batch",
        "4096",
        "--cpu",
        "--backend",
        "jax",
        "--json",
        "--store",
        str(store_path),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    batch = json.loads(proc.stdout)["batch"]
    # doubling 64 -> 128 -> 256 fit, 512 does not; bisection to a multiple of 8: 296 fits, 304 does not
    assert batch["largest"] == 296 and batch["first_oom"] == 304 and batch["limited_by"] == "memory"
    assert [p["batch_size"] for p in batch["probes"]] == [64, 128, 256, 512, 384, 320, 288, 304, 296]
    assert [p["status"] for p in batch["probes"]].count("oom") == 4
    measured = {c["batch_size"]: c["samples_per_s"] for c in batch["curve"]}
    assert max(measured) == 296 and 64 in measured
    best = max(measured.values())
    assert batch["knee"] == min(b for b, v in measured.items() if v >= 0.9 * best)
    # every probe was a fresh child, and none is left behind
    pids = [int(line.split()[1]) for line in (tmp_path / "pids.probes").read_text().splitlines()]
    assert len(set(pids)) == len(pids) >= 9 and not any(psutil.pid_exists(p) for p in pids)
    with sqlite3.connect(store_path) as db:
        statuses = [row[0] for row in db.execute("select status from runs")]
    assert statuses.count("oom") == 4  # out of memory is an answer, and it is stored


def test_the_ablation_runs_every_setting_on_the_cpu_and_stores_them(store_path):
    proc = run_cli(
        "tune",
        "mlp",
        "--parts",
        "ablation",
        "--batch-size",
        "64",
        "--cpu",
        "--backend",
        "tensorflow",
        *QUICK,
        "--json",
        "--store",
        str(store_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    rows = {r["label"]: r for r in report["ablation"]["rows"]}
    assert list(rows)[0] == "baseline" and rows["baseline"]["speedup"]["ratio"] == 1.0
    assert rows["mixed_bfloat16"]["versus"] == "fp32, synthetic data" and rows["mixed_bfloat16"]["data"] == "synthetic"
    assert {"mixed_float16", "mixed_bfloat16", "XLA on (jit_compile=True)"} <= set(rows)
    for label in ("mixed_float16", "mixed_bfloat16", "XLA on (jit_compile=True)"):
        row = rows[label]
        assert (
            row["status"] == "ok"
            and row["speedup"]["ci95_low"] <= row["speedup"]["ratio"] <= row["speedup"]["ci95_high"]
        )
        assert row["loss"]["steps"] == 1 + 1 + 5  # compile step + warm-up + calibration pass: the same step for all
    assert rows["baseline"]["data"] == "naive" and rows["baseline"]["xla"] is False
    assert any(label.startswith("combined") for label in rows)
    assert all(isinstance(r["flags"], list) for r in rows.values())  # bench's variance flags, per row
    assert not any("memory growth" in r["title"] for r in report["recommendations"])  # a CPU run
    with sqlite3.connect(store_path) as db:
        tags = [json.loads(r[0])["tune"]["session"] for r in db.execute("select record_json from runs")]
    assert len(tags) == len(rows) and set(tags) == {report["session"]}


@pytest.mark.parametrize(
    "factory, starves, verdict", [("make_slow", True, "highly input-bound"), ("make_fast", False, "not input-bound")]
)
def test_the_input_verdict_flips_between_a_slow_and_a_fast_pipeline(factory, starves, verdict, store_path):
    proc = run_cli(
        "tune",
        "mlp",
        "--parts",
        "input",
        "--batch-size",
        "256",
        "--pipeline",
        f"{PIPELINES}:{factory}",
        "--cpu",
        "--backend",
        "tensorflow",
        *QUICK,
        "--json",
        "--store",
        str(store_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    inp = json.loads(proc.stdout)["input"]
    assert inp["starves"] is starves and inp["verdict"] == verdict
    if starves:
        assert inp["pipeline"]["samples_per_s"] < 2_700  # the 100 ms sleep per 256 samples


@pytest.mark.parametrize(
    "args, message",
    [
        (("resnet5",), "unknown workload 'resnet5'"),
        (("mlp", "--budget-minutes", "0.05"), "--budget-minutes 0.05 is too small for even the baseline"),
        # the old name is still taken, and says the new one (issue 62: --budget was dollars in recommend)
        (("mlp", "--budget", "0.05"), "note: --budget here is now --budget-minutes"),
        (("mlp", "--budget", "1", "--budget-minutes", "1"), "--budget is --budget-minutes's old name"),
        (("mlp", "--parts", "ablation,speed"), "unknown --parts speed"),
        (("mlp", "--pipeline", "nowhere.py:make"), "give an existing file.py:function"),
    ],
)
def test_bad_tune_input_exits_2(args, message, store_path):
    proc = run_cli("tune", *args, "--cpu", "--store", str(store_path))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_pipeline_factory_that_returns_no_dataset_is_one_line_and_its_traceback_verbose(store_path):
    proc = run_cli(
        "--verbose",
        "tune",
        "mlp",
        "--parts",
        "input",
        "--pipeline",
        f"{PIPELINES}:make_nothing",
        "--cpu",
        "--backend",
        "tensorflow",
        *QUICK,
        "--store",
        str(store_path),
    )
    assert proc.returncode == 2
    assert "make_nothing() returned list, not a tf.data.Dataset" in proc.stderr and "Traceback" in proc.stderr


def test_classification_thresholds_are_the_profilers():
    assert [classify_wait(s) for s in (0.0, 0.049, 0.05, 0.2, 0.2001, 0.9)] == [
        "not input-bound",
        "not input-bound",
        "moderately input-bound",
        "highly input-bound",
        "highly input-bound",
        "highly input-bound",
    ]
    assert classify_wait(None) is None


def test_recommendations_rank_by_measured_gain_and_skip_what_broke_training():
    def row(label, factor, ratio, precision="fp32", changed=False, data="naive"):
        return {
            "label": label,
            "factor": factor,
            "versus": "baseline",
            "status": "ok",
            "precision": precision,
            "data": data,
            "speedup": {"ratio": ratio, "ci95_low": ratio - 0.1, "ci95_high": ratio + 0.1},
            "loss": {
                "baseline": 1.0,
                "value": 9.0 if changed else 1.0,
                "relative": 8.0 if changed else 0.0,
                "changed": changed,
            },
        }

    report = WorkloadTuneReport(
        session="s",
        created_utc="2026-11-28T00:00:00+00:00",
        workload="mlp",
        backend="tensorflow",
        device="gpu",
        budget_s=60.0,
        ablation={
            "best": {"precision": "mixed_bfloat16", "xla": True},
            "rows": [
                row("baseline", None, 1.0),
                row("mixed_float16", "precision", 2.5, "mixed_float16", True),
                row("mixed_bfloat16", "precision", 1.8, "mixed_bfloat16"),
                row("XLA on", "xla", 1.3),
                row("tuned", "input", 1.1, data="pipeline"),
                row("synthetic", "input", 3.0, data="synthetic"),
            ],
        },
        batch=BatchSearch(
            limited_by="memory",
            curve=[
                {"batch_size": 256, "run_id": "a", "status": "ok", "samples_per_s": 100.0},
                {"batch_size": 1024, "run_id": "b", "status": "ok", "samples_per_s": 150.0},
            ],
            knee=1024,
            default=256,
            largest=2048,
        ),
    )
    recs = recommendations(report, Backend.tensorflow)
    assert [r.title for r in recs][:4] == [
        "mixed_bfloat16",
        "batch size 1024 (the knee; the largest that fits is 2048)",
        "XLA on",
        "tuned",
    ]
    assert recs[-1].title.startswith("memory growth") and "set_memory_growth" in recs[-1].code
    on_cpu = recommendations(report, Backend.tensorflow, on_gpu=False)
    assert not any("memory growth" in r.title for r in on_cpu)  # GPU advice only for a GPU


def test_rows_of_one_setting_that_disagree_are_called_noise():
    from gpuscout.report.tune import same_setting_spread

    rows = [
        {
            "label": "tuned input pipeline",
            "precision": "fp32",
            "xla": False,
            "data": "pipeline",
            "samples_per_s": 960.0,
        },
        {
            "label": "combined: fp32, no XLA, tuned pipeline",
            "precision": "fp32",
            "xla": False,
            "data": "pipeline",
            "samples_per_s": 450.0,
        },
        {
            "label": "mixed_bfloat16",
            "precision": "mixed_bfloat16",
            "xla": False,
            "data": "synthetic",
            "samples_per_s": 2000.0,
        },
    ]
    rows = [AblationRow(versus="baseline", status="ok", **row) for row in rows]
    (note,) = same_setting_spread(rows)
    assert note.startswith("'combined: fp32, no XLA, tuned pipeline' and 'tuned input pipeline' ran the same setting")
    assert "differences under 113% are noise" in note
    assert same_setting_spread(rows[:1] + rows[2:]) == []
