"""`gpuscout catalog` and `gpuscout recommend` through the real CLI."""

import json
import re

import pytest

from tests.cli_checks import in_terminal
from tests.conftest import run_cli


def test_catalog_lists_every_gpu_as_json_with_stale_prices():
    proc = run_cli("catalog", "--json")
    assert proc.returncode == 0, proc.stderr
    gpus = json.loads(proc.stdout)["gpus"]
    assert len(gpus) >= 18
    h100 = next(g for g in gpus if g["id"] == "h100_sxm")
    assert h100["bf16_tflops"] == 989.5 and h100["bf16_sparse_tflops"] == 1979.0
    assert all(p["stale"] in (True, False) for p in h100["prices"]) and h100["prices"]


def test_one_gpu_in_full_and_a_near_miss():
    # every GPU at 80 columns: a row of a few lines, the id naming it (issue 62: 104 lines of cards)
    narrow = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", in_terminal("catalog")).splitlines()
    assert max(map(len, narrow)) <= 80 and len(narrow) < 80, "\n".join(narrow)
    assert any(line.startswith("(left out at 80 columns: GPU, segment") for line in narrow)
    # two lines a GPU at most (the price, then where and when), and the price recommend would use: the
    # H100 SXM's cheapest under a year old (Lambda's 3.78 of 2026-05, not its stale 2.99 of 2024-10 nor
    # RunPod's 4.76); the V100 has only stale ones, marked and explained
    rows = [line for line in narrow if line.startswith("│")]
    assert len(rows) <= 2 * len(json.loads(run_cli("catalog", "--json").stdout)["gpus"])
    h100 = next(i for i, line in enumerate(rows) if line.startswith("│ h100_sxm "))
    assert "3.78 $/h " in rows[h100] and "lambda 2026-05" in rows[h100 + 1]
    assert "0.55 $/h* " in next(line for line in rows if line.startswith("│ v100_sxm2_16gb "))
    assert narrow[-1].startswith("* over a year old")
    shown = run_cli("catalog", "a10g")
    assert shown.returncode == 0 and "source" in shown.stdout and "g5.xlarge" in shown.stdout
    miss = run_cli("catalog", "a100_sxm_80gb")
    assert miss.returncode == 2 and "did you mean a100_sxm4_80gb" in miss.stderr


def test_recommend_ranks_with_reasons_as_json(tmp_path):
    proc = run_cli(
        "recommend", "--workload", "resnet50", "--epochs", "90", "--json", "--store", str(tmp_path / "none.sqlite")
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = doc["rows"]
    assert len(rows) >= 18 and rows[0]["eligible"] and rows[0]["cost_usd"] is not None
    costs = [r["cost_usd"] for r in rows if r["eligible"] and r["cost_usd"] is not None]
    assert costs == sorted(costs)
    a100 = next(r for r in rows if r["gpu"] == "a100_sxm4_80gb")
    assert a100["throughput"]["basis"] == "published" and a100["throughput"]["value"] == 2470
    h100 = next(r for r in rows if r["gpu"] == "h100_sxm")
    assert h100["throughput"]["basis"] == "predicted" and h100["throughput"]["low"] < h100["throughput"]["value"]
    assert any("memory-bound" in reason for reason in h100["reasons"])
    # --top means what it says (issue 62): one row, and the GPUs without a price named, not listed
    top = run_cli("recommend", "--workload", "resnet50", "--epochs", "90", "--top", "1", "--store", str(tmp_path / "n"))
    assert top.returncode == 0, top.stderr
    first = next(r for r in rows if r["eligible"])
    unpriced = [r["name"] for r in rows if r["eligible"] and r["usd_per_hour"] is None]
    text = " ".join(top.stdout.split())
    assert "also trains it, with no price in the catalog to rank by:" in text and unpriced
    assert all(name.removeprefix("NVIDIA ").removeprefix("GeForce ") in text for name in unpriced[:3])
    ranked = [line.split()[0] for line in top.stdout.splitlines() if re.match(r"\s*(\d+|—)\s+\d+x ", line)]
    assert ranked == ["1"]  # a log's table: one line a row, and only the one asked for
    # the answer before the table: the best value named in the line under the title
    lines = top.stdout.splitlines()
    assert lines[1].startswith(f"Best value: 1x {first['name'].removeprefix('NVIDIA ').removeprefix('GeForce ')} (")


@pytest.mark.parametrize(
    "args, message",
    [
        (("--workload", "resnet50", "--budget-usd-per-hour", "0"), "--budget-usd-per-hour must be > 0"),
        (("--workload", "resnet5"), "unknown workload 'resnet5': did you mean resnet50"),
        (("--params", "1.3B", "--workload", "mlp"), "give exactly one of --workload, --model, --params or --from RUN"),
        (
            ("--params", "70B", "--dataset-size", "1e12", "--deadline", "1h", "--max-gpus", "8"),
            "no GPU in the catalog trains decoder 70B",
        ),
        (("--params", "1B", "--deadline", "12h"), "--deadline needs the job's size"),
        (
            ("--workload", "mlp", "--deadline", "soon", "--dataset-size", "10"),
            "--deadline must be a duration like 20s, 6m, 1.5h or 3d",
        ),
        (("--workload", "mlp", "--scenario", "cloud"), "unknown --scenario 'cloud'"),
    ],
)
def test_recommend_bad_input_exits_2(args, message, tmp_path):
    proc = run_cli("recommend", *args, "--store", str(tmp_path / "none.sqlite"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_malformed_catalog_file_is_named_with_its_line(tmp_path):
    bad = tmp_path / "mine.toml"
    bad.write_text(
        '[[price]]\ngpu = "l4"\nkind = "rental"\nprovider = "x"\nusd = 1\ndate = "2026-01"\nsource = "a bill"\n'
    )
    proc = run_cli("recommend", "--workload", "mlp", "--catalog", str(bad))
    assert proc.returncode == 2 and "[[price]] #1 (line 1): kind" in proc.stderr
    env_proc = run_cli("catalog", env={"GPUSCOUT_CATALOG": str(bad)})
    assert env_proc.returncode == 2 and "line 1" in env_proc.stderr
