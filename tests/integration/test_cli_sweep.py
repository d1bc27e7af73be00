"""`gpuscout sweep` on the CPU: a real tiny Keras sweep on 2 CPU slots with TensorBoard logs,
resume after the driver is killed, retries and the consecutive-failure stop, a hung trial, a warm
interpreter killed under a trial, two sweeps sharing a store, the Ray executor on a local Ray, and
bad sweep files."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.cli_checks import gone_within
from tests.conftest import FIXTURES, ROOT, SRC, run_cli
from tests.sweep_files import trials, write

TINY = FIXTURES / "sweeps" / "train_tiny.py"
EXAMPLES = ROOT / "examples" / "sweeps"
pytestmark = pytest.mark.slow
# A trial that costs nothing: prints its score as a JSON line (x*y, so the best is known)
# (JSON-quoted: a JSON string is a valid YAML scalar, and the command holds ': ')
ECHO = json.dumps(f"{sys.executable} -c \"import json; print(json.dumps({{{{'score': {{x}} * {{y}}}}}}))\"")


def test_a_workload_sweep_measures_each_trial_through_the_engine_and_stores_its_run(tmp_path, store_path):
    sweep = write(
        tmp_path,
        """
        name: widths
        workload: mlp
        metric: {name: samples_per_s, direction: max}
        space:
          batch_size: [16, 64]
        bench: {backend: jax, windows: 2, window_seconds: 0.2, warmup_steps: 1}
        timeout_s: 300
    """,
    )
    proc = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--json", "--store", str(store_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["status_counts"]["ok"] == 2
    runs = json.loads(run_cli("results", "list", "--json", "--store", str(store_path)).stdout)["runs"]
    by_batch = {r["batch_size"]: r for r in runs}
    assert set(by_batch) == {16, 64} and all(r["spec"]["windows"] == 2 and r["backend"] == "jax" for r in runs)
    stored = {r["run_id"]: r for _, _, r in trials(store_path)}
    assert set(stored) == {r["id"] for r in runs}  # each trial names its stored run
    for run_id, trial in stored.items():  # and ranks by that run's figure
        assert trial["metrics"]["samples_per_s"] == next(r for r in runs if r["id"] == run_id)["samples_per_s"]
    # One compilation cache for the sweep: the first trial compiled into it, the second loaded
    # what does not depend on the batch (the weights' initializers) and compiled its own step.
    cache = summary["compilation_cache"]
    first, second = by_batch[16]["compilation_cache"], by_batch[64]["compilation_cache"]
    assert all(r["spec"]["compilation_cache"] == cache["folder"] for r in runs) and os.listdir(cache["folder"])
    assert first["hits"] == 0 and first["programs"] > 0
    assert 0 < second["hits"] < second["programs"]
    assert (cache["programs"], cache["hits"]) == (first["programs"] + second["programs"], second["hits"])
    shown = run_cli("results", "show", by_batch[64]["id"], "--store", str(store_path)).stdout
    assert f"compilation cache: {second['hits']} of {second['programs']} programs loaded" in shown
    assert summary["best"][0]["value"] == max(r["samples_per_s"] for r in runs)
    # Another sweep of the same store shares the cache: a batch the first compiled is all loaded
    # (jax keys a program by the cache folder's path too, so only one fixed folder can do this)
    again = write(tmp_path, sweep.read_text().replace("name: widths", "name: again").replace("16, 64", "16"), "a.yaml")
    proc = run_cli("sweep", str(again), "--cpu-slots", "1", "--json", "--store", str(store_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout)["compilation_cache"]
    assert loaded["folder"] == cache["folder"]
    assert loaded["hits"] == loaded["programs"] == first["programs"], (loaded, first)
    old = write(
        tmp_path,
        "name: x\nworkload: mlp\nmetric: {name: mfu}\nspace: {batch_size: [8]}\nbench_args: [--windows, '2']\n",
        "old.yaml",
    )
    refused = run_cli("sweep", str(old), "--cpu-slots", "1", "--store", str(store_path))
    assert refused.returncode == 2 and "bench_args is now `bench:`" in refused.stderr
    bad = write(tmp_path, "name: y\nworkload: mlp\nmetric: {name: mfu}\nspace: {batch_size: [8, 0]}\n", "bad.yaml")
    refused = run_cli("sweep", str(bad), "--cpu-slots", "1", "--store", str(store_path))
    assert refused.returncode == 2 and "trial 1 {'batch_size': 0}: --batch-size must be >= 1" in refused.stderr


def test_the_examples_plan_anywhere_and_the_quick_grid_runs_on_two_cpu_slots_with_tensorboard_logs(
    tmp_path, store_path
):
    """examples/sweeps/ as a user runs them from the repository's root: every file's dry run on a
    machine without a GPU (no --cpu-slots) lists its trials and each one's command, a new tpe
    sweep its first proposals; then the quick grid runs for real, its unmodified Keras script
    reporting through fit's logs."""
    here = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    for example in sorted(EXAMPLES.glob("*.yaml")):
        dry = run_cli("sweep", str(example), "--dry-run", "--json", "--store", str(tmp_path / "dry.sqlite"), cwd=ROOT)
        assert dry.returncode == 0, (example.name, dry.stderr[-2000:])
        planned = json.loads(dry.stdout)
        shown = planned["trials"] or planned["first_proposals"]
        assert shown and all(t["command"] for t in shown), example.name
        assert any("no GPU here" in note for note in planned["notes"])
        if "\ncommand:" in example.read_text():
            assert all(t["command"].startswith("python examples/sweeps/train.py --lr ") for t in shown)
    tpe = json.loads(
        run_cli(
            "sweep",
            str(EXAMPLES / "lr_units_tpe.yaml"),
            "--dry-run",
            "--json",
            "--cpu-slots",
            "3",
            "--store",
            str(tmp_path / "dry.sqlite"),
            cwd=ROOT,
        ).stdout
    )
    assert tpe["trials"] == [] and len(tpe["first_proposals"]) == 3  # one a slot, before any result
    sweep = EXAMPLES / "quick_grid.yaml"
    # as on a machine without TensorFlow (the lent GPU hosts): importing it fails as if absent
    blocked = tmp_path / "no_tensorflow" / "tensorflow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\", name='tensorflow')\n"
    )
    proc = run_cli(
        "sweep",
        str(sweep),
        "--cpu-slots",
        "2",
        "--json",
        "--store",
        str(store_path),
        env={"PYTHONPATH": os.pathsep.join([str(blocked.parent), str(SRC)]), **here},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["status_counts"]["ok"] == 4 and summary["run_now"] == 4
    values = [b["value"] for b in summary["best"]]
    assert values == sorted(values, reverse=True) and 0 < values[0] <= 1
    stored = trials(store_path)
    assert len(stored) == 4 and {s for _, s, _ in stored} == {"ok"}
    assert all(r["warm"] for _, _, r in stored)  # forked from one interpreter that imported Keras once
    warm = summary["warm_start"]  # TensorFlow blocked here: the interpreter left it to the script
    assert warm["trials"] == 4 and warm["interpreters"] == 1 and "keras" in warm["imported"], warm
    assert "tensorflow" not in warm["imported"] and warm["refused"] == [] and warm["ready_s"] > 0
    # two at a time (not a speed claim: the trials' intervals): never more than two, and two did run together
    spans = sorted((r["started_monotonic_s"], r["ended_monotonic_s"]) for _, _, r in stored)
    assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) == 2
    assert {r["slot"] for _, _, r in stored} == {"cpu0", "cpu1"}
    assert summary["parallel_speedup"] == pytest.approx(summary["trial_seconds_sum"] / summary["wall_s"])
    first = stored[0][2]
    assert len(first["history"]) == 2 and first["history"][-1]["epoch"] == 2  # fit's epoch logs, every epoch
    assert os.path.exists(os.path.join(first["log_dir"], "stdout-1.log"))
    # every line the instrumented script sent decodes into its kind (core/watch_events): a field of
    # the child's that the parent's type refused would drop the event, not fail loudly
    from gpuscout.core import watch_events

    channel = Path(first["log_dir"], "events-1.jsonl").read_text(encoding="utf-8").splitlines()
    told = [watch_events.decode(line) for line in channel]
    assert channel and all(told), [line for line, e in zip(channel, told) if e is None][:3]
    kinds = {type(e).__name__ for e in told}
    # (a warm trial is hooked in the interpreter it was forked from: its Hooked is that one's)
    assert {"FitBegan", "FitAnnounced", "Window", "EpochEnded", "FitEnded", "Exiting"} <= kinds, kinds
    # the scripts (Keras on jax) compiled through the store's cache: jax read it from the environment
    assert any(name.startswith("jit_") for name in os.listdir(summary["compilation_cache"]["folder"]))
    # TensorBoard: event files with each trial's scalars and the HParams table, written without
    # TensorFlow and read back with TensorBoard's own event reader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = summary["tensorboard"]["logdir"]
    runs = sorted(os.listdir(logdir))
    # a run per trial, and the mark that makes the folder gpuscout's to replace (core/outputs/)
    assert runs == [".written-by-gpuscout"] + [f"trial-{i:04d}" for i in range(4)]
    events = EventAccumulator(os.path.join(logdir, runs[1]))
    events.Reload()
    assert {"val_accuracy", "val_loss", "final/val_accuracy"} <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("val_accuracy")] == [1, 2]
    assert events.Scalars("val_accuracy")[-1].value == pytest.approx(first["history"][-1]["val_accuracy"])
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(events.summary_metadata)


def test_resume_after_the_driver_is_killed_runs_each_trial_once(tmp_path, store_path):
    trial = "import json, time; time.sleep({pause}); print(json.dumps({{'score': {x}}}))"  # {{ }}: the sweep's own
    sweep = write(
        tmp_path,
        f"""
        name: resumable
        command: {json.dumps(f'{sys.executable} -c "{trial}"')}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [1, 2, 3, 4, 5, 6], pause: [1.5]}}
    """,
    )
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="")
    driver = subprocess.Popen(
        [sys.executable, "-m", "gpuscout", "sweep", str(sweep), "--cpu-slots", "1", "--store", str(store_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if store_path.exists() and sum(s == "ok" for _, s, _ in trials(store_path)) >= 2:
                break
        except sqlite3.OperationalError:  # the driver has not created the store's tables yet
            pass
        time.sleep(0.2)
    children = psutil.Process(driver.pid).children(recursive=True)
    driver.send_signal(signal.SIGKILL)  # a crash: no clean-up of any kind
    driver.wait()
    for child in children:  # the orphaned trial (its own session) is someone else's problem in a crash
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    before = {k: r for k, s, r in trials(store_path) if s == "ok"}
    assert 2 <= len(before) < 6
    again = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--store", str(store_path))
    assert again.returncode == 2 and "--resume" in again.stderr  # never silently duplicated
    resumed = run_cli("sweep", str(sweep), "--cpu-slots", "2", "--resume", "--json", "--store", str(store_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    after = trials(store_path)
    assert len(after) == 6 and all(s == "ok" for _, s, _ in after)
    assert summary["skipped_done"] == len(before) and summary["run_now"] == 6 - len(before)
    for key, result in before.items():  # done trials were not run again
        assert dict((k, r) for k, _, r in after)[key] == result
    assert summary["best"][0]["value"] == 6


def test_retries_then_the_consecutive_failure_stop(tmp_path, store_path):
    sweep = write(
        tmp_path,
        f"""
        name: failing
        command: {sys.executable} {TINY} --lr {{lr}} --units {{units}}
        reports: [val_accuracy]
        metric: {{name: val_accuracy}}
        space: {{lr: [0.01], units: [1, 2, 3, 4, 5]}}
        retries: 1
        max_consecutive_failures: 2
    """,
    )
    nccl = (
        "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:305: NCCL operation ncclCommInitRank(&comm, "
        "nranks, id, rank) failed: unhandled system error (run with NCCL_DEBUG=INFO for details)."
    )
    proc = run_cli(
        "sweep",
        str(sweep),
        "--cpu-slots",
        "1",
        "--json",
        "--store",
        str(store_path),
        env={"FAIL_ON": "all", "FAIL_LOG": nccl},
    )
    assert proc.returncode == 1
    summary = json.loads(proc.stdout)
    assert "2 trials failed in a row" in summary["stopped"] and "scripted failure" in summary["stopped"]
    failed = [r for _, s, r in trials(store_path) if s == "failed"]
    assert len(failed) == 2 and all(r["attempts"] == 2 for r in failed)  # retried once each
    assert os.path.exists(os.path.join(failed[0]["log_dir"], "stderr-2.log"))
    # each failed trial keeps what doctor --explain says, and the terminal showed it
    assert all([e["code"] for e in r["explanations"]] == ["nccl_system_error"] for r in failed)
    assert "NCCL_DEBUG=INFO" in failed[0]["explanations"][0]["fix"]
    assert "1. NCCL failed to set up (system error) [nccl_system_error]" in proc.stderr


@pytest.mark.parametrize("warm", [True, False], ids=["warm-start", "cold-start"])
def test_a_hung_trial_is_killed_with_its_process_group(tmp_path, store_path, warm):
    """Forked from the sweep's warm interpreter (executor/warm.py) or an interpreter of its own
    (`warm_start: false`), a trial that hangs past its timeout goes with the process it started."""
    (tmp_path / "hang.py").write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "time.sleep(float(sys.argv[1]))\n"
    )
    sweep = write(
        tmp_path,
        f"""
        name: hang
        command: {sys.executable} {tmp_path / "hang.py"} {{t}}
        reports: [score]
        metric: {{name: score}}
        space: {{t: [300]}}
        timeout_s: 3
        warm_start: {str(warm).lower()}
    """,
    )
    proc = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--json", "--store", str(store_path))
    assert proc.returncode == 1
    ((_, status, result),) = trials(store_path)
    assert status == "timeout" and "3 s trial timeout" in result["message"] and result["warm"] == warm
    leftovers = [
        p.pid for p in psutil.process_iter(["cmdline"]) if "time.sleep(300)" in " ".join(p.info["cmdline"] or [])
    ]
    assert gone_within(leftovers), leftovers


def test_a_trial_whose_warm_interpreter_dies_under_it_runs_again_cold(tmp_path, store_path):
    """The sweep's warm interpreter killed with 9 while a trial forked from it runs: the trial ends
    with it, runs again at once from an interpreter of its own (a second attempt, not a failure),
    and the trials after it start cold; the summary says why."""
    (tmp_path / "lose.py").write_text(
        "import json, os, signal, sys, time\n"
        "with open('/proc/self/cmdline', 'rb') as f:\n"
        "    forked = b'zygote.py' in f.read()  # a forked trial keeps the warm interpreter's command line\n"
        "if forked:\n"
        "    with open(f'/proc/{os.getppid()}/status') as f:  # its guard's parent: the warm interpreter\n"
        "        warm = int(next(line for line in f if line.startswith('PPid:')).split()[1])\n"
        "    os.kill(warm, signal.SIGKILL)\n"
        "    time.sleep(60)\n"
        "print(json.dumps({'score': float(sys.argv[1])}))\n"
    )
    sweep = write(
        tmp_path,
        f"""
        name: lose
        command: {sys.executable} {tmp_path / "lose.py"} {{x}}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [1, 2]}}
        timeout_s: 50
    """,
    )
    began = time.monotonic()
    proc = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--json", "--store", str(store_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.monotonic() - began < 40, "the lost trial waited for its timeout"
    (_, first_status, first), (_, second_status, second) = sorted(trials(store_path), key=lambda t: t[2]["index"])
    # its retries untouched (the loss was not its failure); its first run's files kept beside the second's
    assert (first_status, first["attempts"], first["warm"], first["metrics"]["score"]) == ("ok", 1, False, 1.0)
    assert {"stdout-1.log", "stdout-2.log"} <= set(os.listdir(first["log_dir"]))
    assert "Traceback" not in (Path(first["log_dir"]) / "stderr-1.log").read_text()
    assert (second_status, second["attempts"], second["warm"]) == ("ok", 1, False)
    warm = json.loads(proc.stdout)["warm_start"]
    assert warm["trials"] == 0 and warm["refused"] == ["its interpreter was killed (SIGKILL)"], warm
    # and its own output, where a user reads it, carries no traceback of gpuscout's guard
    assert "Traceback" not in (Path(first["log_dir"]).parent / "warm-python-1.log").read_text()


def test_a_trial_whose_shutdown_never_ends_is_stopped_after_its_code_ran_and_judged_by_it(tmp_path, store_path):
    """It trained, printed its score, then its interpreter's shutdown hung (TensorFlow 2.21's
    tf.data finaliser, tensorflow#21277): stopped EXIT_GRACE_S later, not at the trial timeout,
    and ok with its score."""
    from gpuscout.executor.process import EXIT_GRACE_ENV

    GRACE_S = 4.0  # waited out in full: the default's 20 s would be most of this test's time
    script = tmp_path / "hangs_at_exit.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys, time
        import gpuscout.watch
        for _ in range(3):
            gpuscout.watch.step(samples=8)
        print(json.dumps({"score": float(sys.argv[1])}), flush=True)
        class Finaliser:
            def __del__(self):  # in the interpreter's shutdown, after every atexit handler
                time.sleep(3600)
        finaliser = Finaliser()
    """)
    )
    sweep = write(
        tmp_path,
        f"""
        name: shutdown
        command: {json.dumps(f"{sys.executable} {script} {{x}}")}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [2]}}
        timeout_s: 300
    """,
    )
    started = time.monotonic()
    proc = run_cli(
        "sweep",
        str(sweep),
        "--cpu-slots",
        "1",
        "--json",
        "--store",
        str(store_path),
        env={EXIT_GRACE_ENV: str(GRACE_S)},
    )
    took = time.monotonic() - started
    assert proc.returncode == 0 and took < GRACE_S + 40, (took, proc.stderr[-2000:])
    ((_, status, result),) = trials(store_path)
    assert status == "ok" and result["metrics"]["score"] == 2.0
    assert f"did not exit within {GRACE_S:g} s" in result["message"] and "gc.collect()" in result["message"]


def test_two_sweeps_writing_the_same_store_lose_nothing(tmp_path, store_path):
    paths = [
        write(
            tmp_path,
            f"""
        name: shared-{i}
        command: {ECHO}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [1, 2, 3, 4, 5, 6, 7, 8], y: [{i + 1}]}}
    """,
            f"s{i}.yaml",
        )
        for i in range(2)
    ]
    env = dict(os.environ, PYTHONPATH=str(SRC))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gpuscout", "sweep", str(p), "--cpu-slots", "2", "--store", str(store_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in paths
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    with sqlite3.connect(store_path) as db:
        counts = dict(db.execute("select sweep, count(*) from trials where status = 'ok' group by sweep"))
    assert counts == {"shared-0": 8, "shared-1": 8}


def test_the_ray_executor_on_a_local_ray(tmp_path, store_path):
    pytest.importorskip("ray")
    sweep = write(
        tmp_path,
        f"""
        name: on-ray
        command: {ECHO}
        reports: [score]
        metric: {{name: score, direction: min}}
        space: {{x: [3, 1, 2], y: [10]}}
    """,
    )
    proc = run_cli(
        "sweep", str(sweep), "--executor", "ray", "--cpu-slots", "2", "--json", "--store", str(store_path), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["status_counts"]["ok"] == 3 and summary["best"][0]["value"] == 10
    stored = trials(store_path)
    assert len(stored) == 3 and all(r["slot"].startswith("ray:") for _, _, r in stored)


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\ncommand: run {a}\nreports: [s]\nmetric: {name: s}\nspace:\n  a: [1\n", "line"),
        (
            "name: x\ncommand: run {a} {b}\nreports: [s]\nmetric: {name: s}\nspace:\n  a: [1]\n",
            "line 2: command uses {b} that the space does not define",
        ),
        (
            "name: x\ncommand: run {a}\nreports: [s]\nmetric: {name: s}\nspace:\n  a: [1]\n  b: [2]\n",
            "line 5: space defines b that the command never uses",
        ),
        (
            "name: x\ncommand: run\nreports: [s]\nmetric: {name: s}\nspace: {}\n",
            "space: Dictionary should have at least 1 item",
        ),
        (
            "name: x\ncommand: run {a}\nreports: [loss]\nmetric: {name: accuracy}\nspace:\n  a: [1]\n",
            "line 4: metric 'accuracy' is not among what the trials report",
        ),
        (
            "name: x\ncommand: run {a}\nreports: [s]\nmetric: {name: s}\nspace:\n  a: {uniform: [2, 1]}\n",
            "line 6: space: space.a.uniform must be [low, high] with low < high",
        ),
        (
            "name: x\nworkload: mlp\nmetric: {name: samples_per_s}\nspace:\n  lr: [1]\n",
            "lr is not a `gpuscout bench` option",
        ),
        (
            "name: x\nworkload: mlp\nmetric: {name: accuracy}\nspace:\n  batch_size: [8]\n",
            "a workload trial never reports 'accuracy'",
        ),
        (
            "name: x\ncommand: run {a}\nreports: [s]\nmetric: {name: s}\nspace:\n  a: [1]\ntimeout_s: -1\n",
            "line 7: timeout_s: Input should be greater than 0",
        ),
    ],
)
def test_bad_sweep_files_exit_2_naming_field_and_line(tmp_path, store_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    proc = run_cli("sweep", str(path), "--cpu-slots", "1", "--store", str(store_path))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_without_a_gpu_the_sweep_asks_for_cpu_slots(tmp_path, store_path):
    path = write(
        tmp_path, f"name: x\ncommand: {ECHO}\nreports: [score]\nmetric: {{name: score}}\nspace: {{x: [1], y: [1]}}\n"
    )
    proc = run_cli("sweep", str(path), "--store", str(store_path))
    assert proc.returncode == 2 and "give --cpu-slots N" in proc.stderr
    dry = run_cli("sweep", str(path), "--cpu-slots", "1", "--dry-run", "--json", "--store", str(store_path))
    assert dry.returncode == 0 and json.loads(dry.stdout)["trials"][0]["params"] == {"x": 1, "y": 1}


FULL = """
import subprocess, sys
folder, size, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], check=True)
sys.exit(subprocess.run(argv).returncode)
"""


def test_a_trial_ended_by_a_full_disk_is_gpuscouts_failure_and_resume_runs_it(tmp_path, store_path):
    """Issue 59, item 4: the sweep's folder fills up (a 128 KiB tmpfs in a mount namespace) while a
    trial writes its output. That is not the trial's failure: stored `interrupted` saying so, the
    sweep stops (every trial would meet it), nothing is a traceback; once there is room, `--resume`
    (without --retry-failed) runs it and the rest, once each."""
    sweeps = store_path.parent / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(sweeps)],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace for a small file system here: {probe.stderr.strip()[-300:]}")
    loud = "import json; print(chr(120) * 2**19, flush=True); print(json.dumps({{'score': {x}}}))"
    sweep = write(
        tmp_path,
        f"""
        name: full
        command: {json.dumps(f'{sys.executable} -c "{loud}"')}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [1, 2, 3]}}
    """,
    )
    script = tmp_path / "full.py"
    script.write_text(FULL)
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="")
    filled = subprocess.run(
        [
            "unshare",
            "-m",
            sys.executable,
            str(script),
            str(sweeps),
            "128k",
            sys.executable,
            "-m",
            "gpuscout",
            "sweep",
            str(sweep),
            "--cpu-slots",
            "1",
            "--json",
            "--store",
            str(store_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in filled.stderr, filled.stderr[-3000:]
    summary = json.loads(filled.stdout)
    assert "the sweep stopped (its other trials would meet the same)" in summary["stopped"]
    first, *_ = after_full = trials(store_path)
    assert first[1] == "interrupted" and "not the trial's failure: it stopped on a full disk" in first[2]["message"]
    assert first[2]["ours"] is True and len(after_full) == 1  # the others were never started
    resumed = run_cli("sweep", str(sweep), "--cpu-slots", "1", "--resume", "--json", "--store", str(store_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [(s, r["metrics"]) for _, s, r in trials(store_path)] == [("ok", {"score": x}) for x in (1, 2, 3)]
    assert json.loads(resumed.stdout)["run_now"] == 3


# Issue 87, item 8: a store and a sweep on one small disk (a tmpfs in a mount namespace) that a
# trial fills as it ends, then freed and resumed; the store is copied out before the namespace goes
FILLED = """
import json, sqlite3, subprocess, sys
from pathlib import Path
disk, copy, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
first = subprocess.run(argv, capture_output=True, text=True)
(disk / "filler").unlink()
second = subprocess.run(argv + ["--resume"], capture_output=True, text=True)
with sqlite3.connect(disk / "results.sqlite") as db, sqlite3.connect(copy) as out:
    db.backup(out)
print(json.dumps([[first.returncode, first.stderr], [second.returncode, second.stderr, second.stdout]]))
"""
# The trial: its side effect (a line per run), its score, then, trial 2 only, the disk filled
FILLER = """import json, sys
x = int(sys.argv[1])
open(sys.argv[2], "a").write(f"{x}\\n")
print(json.dumps({"score": x}), flush=True)
if x == 2:
    with open(sys.argv[3], "wb") as f:
        try:
            while True:
                f.write(bytes(65536))
                f.flush()
        except OSError:
            pass
"""


def test_a_trial_that_ended_ok_as_it_filled_the_disk_is_never_run_again(tmp_path):
    """Issue 87, item 8 (third round): the store and the sweep's folder on one disk, which trial 2
    fills as it ends (a checkpoint too many). Its guard could not write its exit file, said it
    exited 1, and `--resume` ran it again. The exit and done files are now reserved before a trial
    runs: the first run stops on the full store with one line, and once there is room, `--resume`
    takes trial 2 from its files and runs only trial 3. Each trial's side effect happens once."""
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace for a small file system here: {probe.stderr.strip()[-300:]}")
    (tmp_path / "trial.py").write_text(FILLER)
    (tmp_path / "drill.py").write_text(FILLED)
    side = tmp_path / "ran.txt"
    command = f"{sys.executable} {tmp_path / 'trial.py'} {{x}} {side} {disk / 'filler'}"
    sweep = write(
        tmp_path,
        f"""
        name: filled
        command: {json.dumps(command)}
        reports: [score]
        metric: {{name: score}}
        space: {{x: [1, 2, 3]}}
    """,
    )
    store = disk / "results.sqlite"
    argv = ["-m", "gpuscout", "sweep", str(sweep), "--cpu-slots", "1", "--json", "--store", str(store)]
    drill = subprocess.run(
        ["unshare", "-m", sys.executable, str(tmp_path / "drill.py"), str(disk), str(tmp_path / "copy.sqlite")]
        + [sys.executable, *argv],
        env=dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=""),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert drill.returncode == 0, drill.stderr[-3000:]
    (first_rc, first_err), (second_rc, second_err, second_out) = json.loads(drill.stdout)
    assert first_rc == 1 and "Traceback" not in first_err and "is full" in first_err, first_err[-2000:]
    assert second_rc == 0, second_err[-3000:]
    ran = side.read_text().split()
    assert ran == ["1", "2", "3"], (ran, first_err, second_out, drill.stderr)  # trial 2 once: taken from its files
    assert [(s, r["metrics"]) for _, s, r in trials(tmp_path / "copy.sqlite")] == [
        ("ok", {"score": x}) for x in (1, 2, 3)
    ]
    assert json.loads(second_out)["run_now"] == 1
