"""Early stopping and model-based search in `gpuscout sweep` (Optuna's pruners and TPE), on real
Keras scripts on the CPU: successive halving against the same sweep unpruned, kill -9 of the
driver and --resume, the median rule, and TPE proposing the same trials twice from one seed."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import FIXTURES, SRC, run_cli
from tests.sweep_files import trials, write

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "sweeps" / "prune_me.py"
HOPELESS = [0.000001, 0.000002, 0.000005, 0.00001]
GOOD = [0.02, 0.005, 0.1, 0.002, 0.05, 0.01, 0.07, 0.03]  # below the stable limit: 0.1 leads at every epoch
ENV = {"KERAS_BACKEND": "jax"}


def sweep_file(tmp_path, name: str, extra: str, lrs: list[float], epochs: int = 4):
    script = tmp_path / "prune_me.py"
    shutil.copy(SCRIPT, script)
    return write(
        tmp_path,
        f"""
        name: {name}
        command: {json.dumps(f"{sys.executable} {script} {{lr}} {epochs}")}
        reports: [val_loss]
        metric: {{name: val_loss, direction: min}}
        space: {{lr: [{", ".join(format(lr, "f") for lr in lrs)}]}}
        {extra}
    """,
        name=f"{name}.yaml",
    )  # written 0.000001, not 1e-06: YAML would read that as text


def ran(tmp_path) -> list[tuple[float, int]]:
    """(learning rate, epochs fit ran) of every run of the script, its code after fit included."""
    log = tmp_path / "done.log"
    return (
        [(float(a), int(b)) for a, b in (line.split() for line in log.read_text().splitlines())] if log.exists() else []
    )


def test_successive_halving_prunes_the_hopeless_keeps_the_best_and_resumes_after_kill_9(tmp_path, store_path):
    # one slot: a rung judges no one until three trials (the reduction factor) have reached it, so the
    # first hopeless trial, second to arrive, runs to its end; every later one is cut at the first rung
    lrs = [GOOD[0], HOPELESS[0], GOOD[1], HOPELESS[1], GOOD[2], HOPELESS[2], HOPELESS[3], *GOOD[3:]]
    sh = sweep_file(tmp_path, "sh", "early_stop: {kind: successive_halving, grace_epochs: 1, reduction_factor: 3}", lrs)
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="", **ENV)
    driver = subprocess.Popen(
        [sys.executable, "-m", "gpuscout", "sweep", str(sh), "--cpu-slots", "1", "--store", str(store_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if store_path.exists() and sum(s in ("ok", "pruned") for _, s, _ in trials(store_path)) >= 4:
                break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    children = psutil.Process(driver.pid).children(recursive=True)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    before = {k: (s, r) for k, s, r in trials(store_path) if s in ("ok", "pruned")}
    assert 4 <= len(before) < 12 and any(s == "pruned" for s, _ in before.values())
    resumed = run_cli("sweep", str(sh), "--cpu-slots", "2", "--resume", "--json", "--store", str(store_path), env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    after = {k: (s, r) for k, s, r in trials(store_path)}
    assert len(after) == 12 and summary["skipped_done"] == len(before)
    for key, (status, result) in before.items():  # decided before the kill: kept, never run again
        assert after[key] == (status, result)
    by_lr = {r["params"]["lr"]: (s, r) for s, r in after.values()}
    by_index = {r["index"]: (s, r) for s, r in after.values()}
    assert by_lr[HOPELESS[0]][0] == "ok"
    for lr in HOPELESS[1:]:  # pruned at the first rung, their one epoch counted, and why
        status, result = by_lr[lr]
        assert status == "pruned" and len(result["history"]) == 1 and "pruned after epoch 1" in result["message"]
        assert "at epoch 1: val_loss" in result["message"] and "trials that reached it" in result["message"]
        # and which trials went on in its place, by their index in the sweep
        went_on = re.search(r"go on \(1 in 3\): trials? (\d+) \(", result["message"])
        assert went_on and by_index[int(went_on[1])][0] in ("ok", "pruned"), result["message"]
    runs = ran(tmp_path)
    assert sorted(lr for lr, _ in runs if lr in HOPELESS) == HOPELESS  # each once, its code after fit run
    assert all(epochs == 1 for lr, epochs in runs if lr in HOPELESS[1:])
    stopping = summary["early_stop"]
    assert stopping["pruned"] == sum(s == "pruned" for s, _ in after.values()) >= 4
    assert stopping["epochs_run"] < stopping["epochs_planned"] == 12 * 4
    assert stopping["best_rank_at_rungs"][0] == {"epoch": 1, "rank": 1, "of": 12}
    assert summary["status_counts"]["pruned"] == stopping["pruned"]
    # the same sweep with every trial run to its end finds the same best, in more epochs
    full = sweep_file(tmp_path, "full", "", lrs)
    done = run_cli("sweep", str(full), "--cpu-slots", "2", "--json", "--store", str(store_path), env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    unpruned = json.loads(done.stdout)
    assert unpruned["best"][0]["params"] == summary["best"][0]["params"] == {"lr": 0.1}
    assert unpruned["best"][0]["value"] == pytest.approx(summary["best"][0]["value"])
    assert sum(len(r["history"]) for _, r in after.values()) < 12 * 4
    # the study kept every decision beside the sweep's files: the trial killed mid-run failed there
    journal = store_path.parent / "sweeps" / "sh" / "study.journal"
    assert journal.exists()
    # the report draws each sweep's metric by epoch (a store of command sweeps holds no runs)
    report = run_cli("report", "--markdown", "-o", str(tmp_path / "r" / "r.md"), "--store", str(store_path))
    assert report.returncode == 0, report.stderr[-2000:]
    assert "## Sweeps" in (tmp_path / "r" / "r.md").read_text()
    assert sorted(p.name for p in (tmp_path / "r" / "r_files").glob("sweeps-*.png")) == ["sweeps-0.png", "sweeps-1.png"]


def test_the_median_rule_and_tpe_from_one_seed(tmp_path, store_path):
    median = sweep_file(
        tmp_path,
        "median",
        "early_stop: {kind: median, grace_epochs: 2}",
        [0.05, 0.1, HOPELESS[0], HOPELESS[1], HOPELESS[2]],
    )
    done = run_cli("sweep", str(median), "--cpu-slots", "1", "--json", "--store", str(store_path), env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = {r["params"]["lr"]: (s, len(r["history"])) for _, s, r in trials(store_path)}
    # the first two set the median (one other trial is not one); each hopeless one is below the
    # median of the trials not stopped before it, and stops at the grace epoch, not before
    assert statuses[0.05] == statuses[0.1] == ("ok", 4)
    assert [statuses[lr] for lr in HOPELESS[:3]] == [("pruned", 2)] * 3
    proposals = []
    for attempt in (1, 2):
        tpe = write(
            tmp_path,
            f"""
            name: tpe{attempt}
            command: {json.dumps(f"{sys.executable} {tmp_path / 'prune_me.py'} {{lr}} 1")}
            reports: [val_loss]
            metric: {{name: val_loss, direction: min}}
            space: {{lr: {{loguniform: [0.0001, 0.1]}}, unused: [1]}}
            strategy: {{kind: tpe, trials: 3, seed: 5}}
        """.replace(" unused: [1]", "").replace(", }", "}"),
            name=f"tpe{attempt}.yaml",
        )
        done = run_cli("sweep", str(tpe), "--cpu-slots", "1", "--json", "--store", str(store_path), env=ENV)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert summary["trials"] == 3 and summary["status_counts"]["ok"] == 3
        with sqlite3.connect(store_path) as db:
            proposals.append(
                [
                    json.loads(p)["lr"]
                    for (p,) in db.execute(
                        "select params_json from trials where sweep = ? order by trial_index", (f"tpe{attempt}",)
                    )
                ]
            )
    assert proposals[0] == proposals[1] and len(set(proposals[0])) == 3
    assert all(0.0001 <= lr <= 0.1 for lr in proposals[0])


def own_loop(tmp_path, store_path, name: str, mode: str, lrs: list[float], early_stop: str):
    """A sweep of report_me.py (a loop of its own: MODE report, lines or end) over `lrs` on one
    slot, run; the CLI's answer."""
    script = tmp_path / "report_me.py"
    shutil.copy(FIXTURES / "sweeps" / "report_me.py", script)
    sweep = write(
        tmp_path,
        f"""
        name: {name}
        command: {json.dumps(f"{sys.executable} {script} {mode} {{lr}}")}
        reports: [val_loss]
        metric: {{name: val_loss, direction: min}}
        space: {{lr: [{", ".join(format(lr, "f") for lr in lrs)}]}}
        early_stop: {early_stop}
    """,
    )
    done = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--json", "--store", str(store_path))
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("mode", ["report", "lines"])
def test_a_loop_of_its_own_is_told_through_report_or_stopped(mode, tmp_path, store_path):
    lrs = [0.5, 0.3, 0.000001, 0.000002]
    done = own_loop(tmp_path, store_path, f"own-{mode}", mode, lrs, "{kind: median, grace_epochs: 1}")
    statuses = {r["params"]["lr"]: s for _, s, r in trials(store_path)}
    # one slot: the second trial has one other to compare with, not a median, and runs through
    assert statuses == {0.5: "ok", 0.3: "ok", 0.000001: "pruned", 0.000002: "pruned"}
    finished = [line.split() for line in (tmp_path / "done.log").read_text().splitlines()]
    if mode == "report":  # told through report(): each ended its own loop after epoch 1 and wrote its file
        assert sorted((float(lr), int(e)) for _, lr, e in finished) == [
            (0.000001, 1),
            (0.000002, 1),
            (0.3, 6),
            (0.5, 6),
        ]
    else:  # printing JSON lines: the pruned ones were stopped, and only those that ran through wrote
        assert [(float(lr), int(e)) for _, lr, e in finished] == [(0.5, 6), (0.3, 6)]
    summary = json.loads(done.stdout)
    assert summary["early_stop"]["pruned"] == 2


def test_hyperbands_later_brackets_are_judged_later(tmp_path, store_path):
    """Six trials, one slot, in brackets 2, 1, 3, 1, 1, 2 (their indexes; rungs 1 and 3): the two
    of bracket 1 that are hopeless stop at epoch 1, the hopeless one of bracket 2 at epoch 3, and
    the hopeless one of bracket 3 runs all six epochs, never judged (its first rung would be 9)."""
    lrs = [0.5, 0.3, 0.000001, 0.000002, 0.000005, 0.00001]
    rule = "{kind: hyperband, grace_epochs: 1, reduction_factor: 3, smooth_epochs: 1}"
    done = own_loop(tmp_path, store_path, "brackets", "report", lrs, rule)
    ran = {r["params"]["lr"]: (s, len(r["history"]), r["message"] or "") for _, s, r in trials(store_path)}
    assert {lr: ran[lr][:2] for lr in lrs} == {
        0.5: ("ok", 6),
        0.3: ("ok", 6),
        0.000001: ("ok", 6),
        0.000002: ("pruned", 1),
        0.000005: ("pruned", 1),
        0.00001: ("pruned", 3),
    }
    assert ran[0.00001][2].startswith("pruned after epoch 3: bracket 2 of 3 (judged from epoch 3), at epoch 3: ")
    assert ran[0.000002][2].startswith("pruned after epoch 1: bracket 1 of 3 (judged from epoch 1), at epoch 1: ")
    # the synchronous schedule of those brackets: 3 x 1, then the best 1 of 3 and 2 new ones to 3
    # (1 x 2 + 2 x 3), 1 on to 6 (1 x 3), and bracket 3's one trial all 6: 20 epochs
    stopping = json.loads(done.stdout)["early_stop"]
    assert stopping["epochs_synchronous"] == 3 + 2 + 6 + 3 + 6 == 20
    # the dry run says it beforehand, trial by trial
    dry = run_cli("sweep", str(tmp_path / "sweep.yaml"), "--cpu-slots", "1", "--dry-run", "--store", str(store_path))
    assert dry.returncode == 0, dry.stderr[-2000:]
    said = [line.split("(")[-1].rstrip(")") for line in dry.stdout.splitlines() if '{"lr"' in line]
    assert said == [
        "ok; bracket 2 of 3, judged from epoch 3",
        "ok; bracket 1 of 3, judged from epoch 1",
        "ok; bracket 3 of 3, judged from epoch 9",
        "pruned; bracket 1 of 3, judged from epoch 1",
        "pruned; bracket 1 of 3, judged from epoch 1",
        "pruned; bracket 2 of 3, judged from epoch 3",
    ]
    assert [(b["trials"], b["judged_from_epoch"]) for b in stopping["brackets"]] == [(3, 1), (2, 3), (1, 9)]


def test_a_metric_reported_only_at_the_end_is_said_to_leave_nothing_to_prune(tmp_path, store_path):
    done = own_loop(tmp_path, store_path, "own-end", "end", [0.5, 0.000001], "{kind: median, grace_epochs: 1}")
    summary = json.loads(done.stdout)
    assert summary["status_counts"]["ok"] == 2 and summary["status_counts"]["pruned"] == 0
    said = [n for n in summary["notes"] if n.startswith("early_stop cannot act")]
    assert len(said) == 1 and "reported val_loss only at its end" in said[0]  # said once, not per trial
    assert "early_stop cannot act" in done.stderr.replace("\n", " ")
