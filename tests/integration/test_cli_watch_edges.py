"""`gpuscout watch` at the edges (issue 29), through the real CLI on a real Keras script
(tests/fixtures/watch/edges.py): a stop at --steps/--duration runs nothing more of the script,
warm-up is left out, the summary says what the script ran, callbacks and a PyDataset's own
workers are read, a crash before fit is the finding, and start-up is not idle time."""

from __future__ import annotations

import re
import sys
import time

import pytest

from gpuscout.store import Store
from tests.cli_checks import QUIET_TF, stored
from tests.conftest import FIXTURES, alive, run_cli

EDGES = str(FIXTURES / "watch" / "edges.py")
LOOP = str(FIXTURES / "watch" / "loop.py")
PY = sys.executable


@pytest.mark.slow
@pytest.mark.parametrize("backend, limit", [("jax", ["--duration", "5s"]), ("tensorflow", ["--steps", "400"])])
def test_a_limit_stops_the_script_where_it_is(backend, limit, store_path, tmp_path):
    """After the limit no validation, no callback, no code after fit and no `finally` of the
    script runs, nothing is written, no traceback; the record comes first and says so."""
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    result = run_cli(
        "watch",
        *limit,
        "--store",
        str(store_path),
        "--",
        PY,
        EDGES,
        "checkpoint",
        str(out),
        env={"KERAS_BACKEND": backend, **QUIET_TF},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 90
    assert sorted(p.name for p in out.iterdir()) == []  # no checkpoint, no after_fit.txt
    assert "finally block ran" not in result.stdout and "Traceback" not in result.stderr
    (record,) = stored(store_path)
    assert record.status == "stopped" and record.main.stopped_by_limit
    assert "as asked; the rest of the script did not run" in result.stdout
    # Keras waits for each step's logs because of these two (not async_safe, batch-end hooks)
    assert record.main.sync_callbacks == ["ModelCheckpoint", "ReadsLogs"]
    assert "made Keras wait for each step's logs" in result.stdout
    if backend == "tensorflow":
        assert record.main.steps == 400 and "after 400 training steps (--steps 400)" in result.stdout
    else:  # five seconds of 1 s windows: the first after the compile is warm-up, left out of every figure
        assert record.warmup_windows >= 1 and record.warmup_steps == sum(
            w.steps for w in record.windows[: record.warmup_windows]
        )
        assert record.throughput.n == len(record.windows) - record.warmup_windows
        steady = record.windows[record.warmup_windows :]
        assert record.step_time_s == pytest.approx(sum(w.seconds for w in steady) / sum(w.steps for w in steady))
        assert f"warm-up left out: {record.warmup_steps} steps" in result.stdout


@pytest.mark.slow
def test_watch_says_what_the_script_ran(store_path):
    """jax with jit_compile=False is "no XLA" and gets the jit advice; a CPU-only tensorflow with
    Keras' default runs no XLA and gets none; a slow epoch-end callback is named with its cost; a
    PyDataset's 3 worker threads are read and the advice says what threads cannot do."""
    nojit = run_cli(
        "watch", "--store", str(store_path), "--", PY, EDGES, "nojit", env={"KERAS_BACKEND": "jax", **QUIET_TF}
    )
    threads = run_cli(
        "watch", "--store", str(store_path), "--", PY, EDGES, "threads", env={"KERAS_BACKEND": "tensorflow", **QUIET_TF}
    )
    assert nojit.returncode == 0 and threads.returncode == 0, (nojit.stderr[-2000:], threads.stderr[-2000:])
    records = {r.main.backend: r for r in stored(store_path)}
    jax_run, tf_run = records["jax"], records["tensorflow"]
    assert "jax, float32, no XLA (jit_compile=False)" in nojit.stdout and jax_run.main.jit_compile is False
    xla = next(c for c in jax_run.verdict if c.code == "xla_off")
    assert "jit_compile=True" in xla.code_snippet
    callbacks = next(c for c in jax_run.verdict if c.code == "callbacks")
    cost = re.search(r"SlowSave: ([\d.]+) (ms|s) per epoch", callbacks.evidence)  # at least the 0.2 s it sleeps
    assert cost and float(cost.group(1)) / (1000 if cost.group(2) == "ms" else 1) >= 0.2, callbacks.evidence
    assert [e.callbacks_s["SlowSave"] >= 0.2 for e in jax_run.main.epochs] == [True] * 3
    assert "no XLA (Keras' default on a CPU-only TensorFlow)" in threads.stdout
    assert "xla_off" not in [c.code for c in tf_run.verdict]
    assert tf_run.main.input_workers == 3 and tf_run.main.input_multiprocessing is False
    assert "PyDataset (3 worker threads)" in threads.stdout
    assert f"gpuscout tune -- {PY} {EDGES} threads" in " ".join(threads.stdout.split())  # measure the advice
    waiting = next(c for c in tf_run.verdict if c.code == "input_bound")
    # its batches are the same every epoch: watch offers what tune would try first, the cache (the
    # advice for 3 threads under the GIL: tests/unit/test_watch_logic.py)
    assert waiting.fix.startswith("make each batch once and keep it") and "class CachedBatches" in waiting.code_snippet


@pytest.mark.slow
def test_a_crash_before_fit_is_the_finding(store_path):
    result = run_cli(
        "watch", "--store", str(store_path), "--", PY, EDGES, "crash", env={"KERAS_BACKEND": "jax", **QUIET_TF}
    )
    assert result.returncode == 1
    (record,) = stored(store_path)
    assert record.status == "failed" and record.exit_code == 1
    first = record.verdict[0]
    assert first.code == "script_failed" and "no Keras Model.fit" not in result.stdout
    assert "ValueError: could not read the training data" in first.evidence
    assert "the script failed (exit code 1) before any training step was timed" in result.stdout


def test_a_script_whose_shutdown_never_ends_is_stopped_after_its_code_ran_and_kept(store_path):
    """Its loop ran to the end, then the interpreter's shutdown hung (as TensorFlow 2.21 does with
    a tf.data iterator over tf.py_function): watch stops it EXIT_GRACE_S later, not never, and
    keeps the run, saying why and what to change."""
    from gpuscout.executor.process import EXIT_GRACE_ENV

    GRACE_S = 4.0  # waited out in full: the default's 20 s would be most of this test's time
    started = time.monotonic()
    done = run_cli(
        "watch",
        "--store",
        str(store_path),
        "--",
        PY,
        LOOP,
        "hang-at-exit",
        "20",
        timeout=120,
        env={EXIT_GRACE_ENV: str(GRACE_S)},
    )  # the grace waited out: shorter than the default's 20 s
    took = time.monotonic() - started
    assert done.returncode == 0 and GRACE_S <= took < GRACE_S + 30, (took, done.stderr[-2000:])
    (record,) = stored(store_path)
    assert record.status == "ok" and record.exit_code is None and record.windows and record.samples_per_s
    pid = int(re.search(r"^pid (\d+)", done.stdout, re.M).group(1))
    assert not alive(pid)
    said = " ".join(done.stdout.split())
    assert f"process {pid} ran all of the script's code, then did not exit within {GRACE_S:g} s" in said
    assert "call gc.collect() at the script's end" in said and any("tensorflow#21277" in n for n in record.notes)


def test_start_up_is_not_idle_time(store_path, fake_gpu):
    """A loop timed by NVML only, on a GPU idle for its first 1.5 s (imports, compiling) and then
    60% busy: busy is judged over the steady part, start-up shown apart, and no saving promised
    that the steady part does not show (40%, not the 50-60% of the whole run)."""
    fake = fake_gpu(utilization_pct=[[0, 0], [1.5, 60]])
    result = run_cli(
        "watch", "--store", str(store_path), "--", PY, LOOP, "unmarked", "160", env={"GPUSCOUT_FAKE_NVML": str(fake)}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (record,) = stored(store_path)
    assert 1.0 < record.startup_s < 2.5
    assert record.telemetry.gpu_util_mean_pct == pytest.approx(60)
    idle = next(c for c in record.verdict if c.code == "gpu_idle")
    assert idle.saving_share == pytest.approx(0.4)
    assert "before the GPU was first busy" in result.stdout


@pytest.mark.slow
def test_a_timed_out_trial_shows_what_it_reported_and_counts_its_steps(tmp_path):
    """Issue 29, items 9 and 10: a trial killed at the sweep's timeout after reporting epochs keeps
    its metrics in the summary, marked timed out, and its step count is the steps that ran."""
    script = tmp_path / "fit_sweep.py"  # it writes runs.log beside itself
    script.write_text((FIXTURES / "watch" / "fit_sweep.py").read_text())
    sweep = tmp_path / "long.yaml"
    sweep.write_text(
        f"name: long\ncommand: KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 {PY} {script} {{lr}} 100000\n"
        # the timeout must come after the first reports: they came 5-8 s after the trial's start on a
        # quiet 2-core machine, and past 12 s on one running the suite beside other work (a fresh
        # clone's CI, 2026-12-02); 30 s holds a machine three times slower
        "reports: [val_accuracy]\nmetric: {name: val_accuracy, direction: max}\ntimeout_s: 30\n"
        "space:\n  lr: [0.05]\n"
    )
    store = tmp_path / "s.sqlite"
    result = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--store", str(store))
    assert result.returncode == 1, result.stderr[-3000:]  # a trial did not complete
    with Store(store, create=False) as s:
        (trial,) = [t.model_dump() for t in s.trials("long")]
    assert trial["status"] == "timeout"
    reported = trial["result"]["metrics"]["val_accuracy"]
    assert 0 <= reported <= 1 and len(trial["result"]["history"]) >= 1
    steps = trial["result"]["steps"]
    assert steps["steps"] > 12 and steps["step_time_s"] > 0  # 12 steps an epoch, several epochs ran
    assert "no result yet" not in result.stderr and "(trial 0, timed out: its last report)" in result.stderr
    assert "timed out (killed at the trial timeout)" in result.stdout
    assert f"{reported:.6g} (timed out)" in result.stdout
