"""`gpuscout recommend --from RUN` through the real CLI: records watched on an H100 (a fixture of
real runs), records watched here on the CPU (test_cli_watch.py calls `recommend_from_watched` on the
store its real Keras runs made), bad input, the 80-column layout and the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.cli_checks import in_terminal, one_error_line
from tests.conftest import FIXTURES, run_cli
from tests.records import make_record, make_watch_record

H100_RUNS = FIXTURES / "recommend" / "h100_watch.json"
# The same three scripts watched on an H200 in the same session (docs/benchmarks.md, issue 32):
# the medians of two runs each.
H200_MEASURED = {"gpu": 1623.0, "input": 2508.0, "host": 681.0}


def imported(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    store = tmp_path / "s.sqlite"
    done = run_cli("results", "import", str(H100_RUNS), "--store", str(store))
    assert done.returncode == 0, done.stderr
    runs = json.loads(H100_RUNS.read_text())["runs"]
    return store, {r["command"][-1]: r["id"] for r in runs}


def test_runs_watched_on_an_h100_predict_the_h200_within_ten_percent(tmp_path):
    store, ids = imported(tmp_path)
    for script, run_id in ids.items():
        done = run_cli("recommend", "--from", run_id[:6], "--json", "--trials", "9", "--store", str(store))
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        rows = {r["gpu"]: r for r in doc["rows"]}
        measured_here = rows["h100_sxm"]["throughput"]
        assert measured_here["basis"] == "measured"
        assert measured_here["value"] == pytest.approx(doc["from"]["samples_per_s"])
        h200 = rows["h200"]["throughput"]
        assert h200["basis"] == "predicted" and h200["low"] < h200["value"] < h200["high"]
        assert abs(h200["value"] / H200_MEASURED[script] - 1) <= 0.10, (script, h200["value"])
        assert h200["low"] <= H200_MEASURED[script] <= h200["high"]
        split = doc["from"]["split"]
        sweep = doc["sweep"]
        once = doc["from"]["compile_s"] / 3600  # jax: the trials share one compilation cache
        assert doc["from"]["backend"] == "jax" and once > 0
        assert sweep["trials"] == 9
        assert sweep["here_h"] == pytest.approx(once + 9 * (rows["h100_sxm"]["one_gpu_hours"] - once))
        assert sweep["fastest"]["wall_h"] <= sweep["here_h"]
        if script == "gpu":  # GPU-bound: a faster GPU pays; no fix-first advice
            assert split["gpu_share"] > 0.8 and doc["from"]["fix_first"] is None
            assert rows["b200"]["throughput"]["value"] > 1.5 * measured_here["value"]
        else:  # input- or host-bound: no GPU helps much, and it says what to fix
            assert split["gpu_share"] < 0.1 and "gpuscout tune -- " in doc["from"]["fix_first"]
            assert rows["b200"]["throughput"]["value"] < 1.1 * measured_here["value"]
            # about the same speed on every GPU: a cheap one trains it for least, far below an H100's price
            first = doc["rows"][0]
            assert first["throughput"]["value"] > 0.8 * measured_here["value"]
            assert first["usd_per_hour"] < 0.5 * rows["h100_sxm"]["usd_per_hour"]
    # an 80-column terminal: no line wider; tables too wide become one `column: value` line each
    shown = in_terminal("recommend", "--from", ids["input"], "--trials", "9", "--top", "4", "--store", str(store))
    assert max(len(line) for line in shown.splitlines()) <= 80, shown
    # the answer first (issue 62): the best value, what to fix first, then a table that fits 80 columns
    # (one line a GPU, every number whole), then the detail
    lines = shown.splitlines()
    assert any(line.startswith("Best value: 1x ") for line in lines[1:3]), shown  # under the title
    table = [line for line in lines if re.match(r"\s*\d+\s+1x .+\s[\d,]+(\.\d)?\s+(predicted|measured)\s", line)]
    assert len(table) == 4, shown
    text = " ".join(shown.split())
    assert text.index("Fix first:") < text.index(" basis ") < text.index("92% waiting for input")
    # the input capped at 2,375 samples/s: 19 of the 25 GPUs that fit reach 80% of it, 1,900 (not the
    # T4, A10, A10G, L4, RTX 3060 or Jetson: 1,335-1,876; the A40 just does, 1,932; the L40 and RTX 6000 Ada
    # do), the cheapest of them the RTX 3090 (RunPod's 0.39 USD/h of 2026-03, below the V100's and the RTX
    # A6000's 0.55)
    assert "The input and host cap this training at 2,375 samples/s: 19 of the 25 GPUs reach 80%" in text
    assert "Take the cheapest of those (1x RTX 3090, 0.39 USD/h)" in text
    assert "9 trials:" in text and "one after another on the NVIDIA H100" in text
    # the report shows the recommendation beside each watched run
    report = run_cli("report", "--markdown", "-o", str(tmp_path / "r" / "report.md"), "--store", str(store))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "r" / "report.md").read_text()
    assert "cheapest to train" in page and ids["gpu"] in page and "Fix that first" in page


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    store, ids = imported(tmp_path)
    with Store(store) as s:
        s.put(make_watch_record("failed01", events=[], status="failed", exit_code=1))
        s.put(make_record("bench001", status="failed"))
    cases = [
        (["--from", "nosuchrun"], "no run 'nosuchrun'"),
        (["--from", "failed01"], "did not train"),
        (["--from", "bench001"], "has no throughput"),
        (["--from", ids["gpu"], "--trials", "0"], "--trials must be >= 1"),
        (["--from", ids["gpu"], "--precision", "fp32"], "--from takes the run's own precision"),
        (["--from", ids["gpu"], "--batch-size", "8"], "--from takes the run's own batch-size"),
        (["--workload", "resnet50", "--trials", "3"], "--trials prices a sweep of a measured training"),
        (["--from", ids["gpu"], "--workload", "resnet50"], "give exactly one of"),
    ]
    before = store.read_bytes()
    for args, message in cases:
        one_error_line(run_cli("recommend", *args, "--store", str(store)), message)
    assert store.read_bytes() == before
    one_error_line(run_cli("recommend", "--from", "abc", "--store", str(tmp_path / "none.sqlite")), "no store at")
