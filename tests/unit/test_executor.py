"""Failure paths of the child executor, with a fake worker (tests/fixtures/fake_worker.py)."""

import sys
import time

import pytest

from gpuscout.core.spec import Backend, build_spec
from gpuscout.executor.local import child_env, run_child
from tests.conftest import FIXTURES, alive


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCOUT_WORKER", f"{sys.executable} {FIXTURES / 'fake_worker.py'}")
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    return tmp_path / "pids"


def spec(workload: str):
    return build_spec(workload=workload, backend=Backend.jax, batch_size=4)


def test_success_returns_the_result_and_streams_events():
    seen = []
    outcome = run_child(spec("resnet18_cifar"), timeout_s=60, on_event=seen.append)
    assert outcome.status == "ok" and outcome.returncode == 0
    assert len(outcome.result.windows) == 3
    assert [e["event"] for e in seen] == ["started", "compiled", "warmed_up", "window", "window", "window", "result"]


def test_out_of_memory_is_recorded_as_oom_with_the_stderr_tail():
    outcome = run_child(spec("mlp"), timeout_s=60)
    assert outcome.status == "oom" and outcome.result is None
    assert "RESOURCE_EXHAUSTED" in outcome.stderr_tail


def test_crash_is_recorded_as_failed_naming_the_signal(monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "crash")
    outcome = run_child(spec("resnet18_cifar"), timeout_s=60)
    assert outcome.status == "failed" and "SIGABRT" in outcome.message
    assert "about to crash" in outcome.stderr_tail


def test_a_child_that_does_not_exit_after_its_result_is_stopped_and_its_result_kept(monkeypatch):
    from gpuscout.executor import process

    monkeypatch.setenv("FAKE_MODE", "linger")
    monkeypatch.setattr(process, "EXIT_GRACE_S", 1.0)
    started = time.monotonic()
    outcome = run_child(spec("resnet18_cifar"), timeout_s=60)
    assert outcome.status == "ok" and len(outcome.result.windows) == 3
    assert outcome.returncode != 0 and time.monotonic() - started < 15


def test_timeout_kills_the_whole_process_group(fake_worker):
    started = time.monotonic()
    outcome = run_child(spec("resnet50"), timeout_s=3)
    assert outcome.status == "timeout" and "3 s timeout" in outcome.message
    assert time.monotonic() - started < 15
    child, grandchild = map(int, fake_worker.read_text().split())
    time.sleep(0.2)
    assert not alive(child) and not alive(grandchild)


def test_child_environment_is_set_before_framework_import():
    gpu = child_env(build_spec(workload="mlp", backend=Backend.tensorflow, batch_size=4, gpu_index=1), base={})
    assert gpu["KERAS_BACKEND"] == "tensorflow" and gpu["CUDA_VISIBLE_DEVICES"] == "1"
    assert gpu["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and gpu["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    cpu = child_env(spec("mlp"), base={"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["JAX_PLATFORMS"] == "cpu"
    assert cpu["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"  # the user's choice wins


# A process of the child's group sends a last event naming its pid, then either exits while the
# child runs on (a script whose first command trained), or never exits (a shutdown that hangs).
SENDER = r"""
import os, subprocess, sys, time
from gpuscout.core import events
role, mode = sys.argv[1], sys.argv[2]
if role == "sender":
    events.emit({"event": "done", "pid": os.getpid()})
    if mode == "hangs":
        time.sleep(60)
else:  # the child: runs the sender (handing it the event pipe), then 3 s of its own
    subprocess.run([sys.executable, __file__, "sender", mode], close_fds=False)
    time.sleep(3)
"""


@pytest.mark.parametrize("sender", ["exits", "hangs"])
def test_the_exit_grace_follows_the_process_that_sent_the_last_event(sender, monkeypatch, tmp_path):
    from gpuscout.executor import process
    from tests.conftest import SRC

    monkeypatch.setattr(process, "EXIT_GRACE_S", 1.0)
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    started = time.monotonic()
    finished = process.run(
        [sys.executable, str(script), "child", sender],
        env={"PYTHONPATH": str(SRC)},
        timeout_s=60,
        stdout=None,
        stderr=None,
        last_events=("done",),
    )
    took = time.monotonic() - started
    assert [e["event"] for e in finished.events] == ["done"]
    if sender == "exits":  # the rest of the group ran on to its own end, past the grace
        assert not finished.lingered and finished.returncode == 0 and took >= 3, (finished, took)
    else:  # the sender did not exit: stopped after the grace, the group with it
        assert finished.lingered and finished.returncode != 0 and took < 10, (finished, took)


def test_a_stopped_group_is_done_when_its_processes_end_not_after_the_grace(tmp_path):
    """Stopping a watched script at --steps (stop_now), a timeout or a cancel SIGTERMs its group.
    The group leader (the guard) is gpuscout's own child: a zombie until reaped, as is an orphaned
    grandchild until PID 1 reaps it, which in a container can take seconds. Neither may keep the
    stop waiting out TERM_GRACE_S: that was 3 s added to every run tune made (docs/benchmarks.md)."""
    import threading

    from gpuscout.executor import process

    marker = tmp_path / "children"
    # a shell with a grandchild that exits with it on SIGTERM, and a process that never would by itself
    line = f"sleep 60 & echo $! > {marker}; sleep 60"
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    started = time.monotonic()
    finished = process.run(
        ["/bin/sh", "-c", line], env={"PATH": "/usr/bin:/bin"}, timeout_s=60, stdout=None, stderr=None, stop_now=stop
    )
    took = time.monotonic() - started
    assert finished.cancelled and finished.returncode != 0
    assert took < 1.0 + process.TERM_GRACE_S / 2, took  # the stop, not the grace
    time.sleep(0.2)
    assert not alive(int(marker.read_text()))


def test_a_zombie_does_not_keep_agroup_running():
    import os
    import signal
    import subprocess

    from gpuscout.executor import process

    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert process.group_running(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    time.sleep(0.2)  # dead, not reaped: the group still answers kill(0), and is not running
    os.killpg(child.pid, 0)
    assert not process.group_running(child.pid)
    child.wait()


def test_a_command_killed_with_9_ends_its_guard_the_same_way_without_a_traceback(tmp_path):
    """What the OOM killer does to a training: the guard writes its status and ends by the same
    signal (Python cannot set SIGKILL's action: the guard used to die of that, exit status 1, with
    its traceback in the command's stderr)."""
    import json
    import signal

    from gpuscout.executor import process

    status, err = tmp_path / "status.json", tmp_path / "err"
    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    with open(tmp_path / "out", "wb") as out, open(err, "wb") as stderr:
        finished = process.run(argv, env={}, timeout_s=30, stdout=out, stderr=stderr, status_file=status)
    written = json.loads(status.read_text())
    assert finished.returncode == -signal.SIGKILL and (written["returncode"], written["warm"]) == (-9, False)
    assert "Traceback" not in err.read_text()


def test_the_guard_tells_a_process_ending_on_a_cpu_from_one_asleep_in_its_work():
    """executor/guard.py's grace when its parent dies: a process running (finishing its last act) is
    given up to ENDING_MOST_S, one asleep is killed at ENDING_S: /proc's state says which."""
    import subprocess
    import sys

    from gpuscout.executor import guard

    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 30
        while guard.on_a_cpu(asleep.pid) or not guard.on_a_cpu(busy.pid):  # both past their start
            assert time.monotonic() < deadline, "the two processes never settled"
            time.sleep(0.05)
        assert not guard.on_a_cpu(asleep.pid) and guard.on_a_cpu(busy.pid)
        assert not guard.on_a_cpu(2**22 + 17)  # no such process: not on a CPU
        assert guard.ENDING_S < guard.ENDING_MOST_S <= 3.0  # bounded: no child outlives gpuscout for long
    finally:
        for process in (asleep, busy):
            process.kill()
            process.wait()
