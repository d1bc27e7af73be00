"""Warm starts (executor/warm.py, warm_scan.py, zygote.py): what the scan of a script preloads, which
commands are forked, and a forked trial that is, to itself and to gpuscout, the cold
`python SCRIPT ARGS` it stands for. numpy is the framework here (a real one, quick to import)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpuscout.executor import process, warm, warm_scan
from tests.conftest import alive


def scan(tmp_path: Path, text: str):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    return warm_scan.preloads(str(script))


def test_the_scan_preloads_the_frameworks_imported_before_anything_runs(tmp_path):
    modules, settings = scan(
        tmp_path,
        '''
        """A docstring."""
        import argparse, os
        os.environ.setdefault("KERAS_BACKEND", "jax")
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        SEED = 0
        try:
            import tensorflow as tf
        except ImportError:
            tf = None
        import keras.layers
        from jax import numpy as jnp
        from . import helpers
        def build(): ...
        import numpy
        parser = argparse.ArgumentParser()
        import pandas
        ''',
    )
    assert modules == ["tensorflow", "keras", "jax", "numpy"]  # pandas comes after code that ran
    assert scan(tmp_path, "import keras\n")[0] == ["keras", "tensorflow"]  # Keras imports it to seed it
    assert settings == [("KERAS_BACKEND", "jax", True), ("TF_CPP_MIN_LOG_LEVEL", "2", False)]
    assert warm_scan.with_settings({"KERAS_BACKEND": "torch"}, settings) == {
        "KERAS_BACKEND": "torch",  # setdefault: the environment's own value wins, as in the script
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


@pytest.mark.parametrize(
    "text, modules",
    [
        ("import sys\nsys.path.insert(0, 'vendor')\nimport jax\n", []),  # a vendored jax: not site's
        ("import os\nos.environ['KERAS_BACKEND'] = os.environ.get('B', 'jax')\nimport jax\n", []),
        ("import numpy\nos.environ['KERAS_BACKEND'] = 'jax'\nimport jax\n", ["numpy"]),  # numpy saw no setting
        ("@decorated\ndef f(): ...\nimport jax\n", []),
        ("import jax\n  bad indentation\n", []),
    ],
    ids=["sys-path", "computed-setting", "setting-after-import", "decorator", "syntax-error"],
)
def test_the_scan_stops_where_code_could_change_an_import(tmp_path, text, modules):
    assert scan(tmp_path, text)[0] == modules


def test_only_python_running_a_script_is_forked(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    env = {"PATH": os.environ["PATH"]}
    assert warm_scan.python_script([sys.executable, str(script), "--lr", "1"], env) == (sys.executable, str(script))
    assert warm_scan.python_script([sys.executable, "-m", "train"], env) is None
    assert warm_scan.python_script([sys.executable, str(tmp_path / "missing.py")], env) is None
    assert warm_scan.python_script(["/bin/sh", "-c", f"python {script}"], env) is None
    assert warm_scan.python_script(["bash", str(script)], env) is None


TRIAL = """import sys
import json, os, random, signal, time
import numpy
mode = sys.argv[1]
if mode == "sleep":
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
if mode == "raise":
    raise ValueError("boom")
# what the interpreter's end does for a script, a forked one's quick end does too
import atexit, gc, threading
left_open = open(os.environ["LEFT_OPEN"], "w")
left_open.write("flushed at exit")
atexit.register(print, "atexit ran")
threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined", flush=True))).start()
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "shared": os.environ.get("SHARED"),
    "random": random.random(), "numpy": float(numpy.random.rand()), "pgid_is_parent": os.getpgid(0) == os.getppid(),
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler, "frozen": gc.get_freeze_count(),
}))
sys.exit(int(mode))
"""


def run_trial(starts: warm.WarmStarts, script: Path, args: list[str], tmp_path: Path, cuda: str, **run):
    argv = [sys.executable, str(script), *args]
    env = {**os.environ, "SHARED": "yes", "CUDA_VISIBLE_DEVICES": cuda, "LEFT_OPEN": str(tmp_path / f"open-{cuda}")}
    starter = starts.starter(argv, env)
    out, err, status = (tmp_path / f"out-{cuda}", tmp_path / f"err-{cuda}", tmp_path / f"status-{cuda}")
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        finished = process.run(
            argv, env=env, stdout=stdout, stderr=stderr, start=starter, status_file=status, **{"timeout_s": 60, **run}
        )
    # a stopped trial's guard is stopped with it, before it writes a status (a cold one's too)
    return (
        finished,
        starter,
        out.read_text(),
        err.read_text(),
        json.loads(status.read_text() or "null") if (status.exists()) else None,
    )


def test_a_forked_trial_is_the_script_its_command_names(tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    script = tmp_path / "code" / "trial.py"
    script.write_text("import numpy\n" + TRIAL)
    monkeypatch.chdir(tmp_path)
    starts = warm.WarmStarts(tmp_path, frozenset({"CUDA_VISIBLE_DEVICES", "LEFT_OPEN"}).__contains__)
    try:
        # made by a thread that ends at once (a sweep's slot thread): the zygote must outlive it
        maker = threading.Thread(
            target=starts.starter, args=([sys.executable, str(script)], {**os.environ, "SHARED": "yes"})
        )
        maker.start()
        maker.join()
        time.sleep(0.5)
        seen = []
        for cuda in ("0", "1"):
            finished, starter, out, err, status = run_trial(starts, script, ["3"], tmp_path, cuda)
            assert starter is not None and starter.used, "forked, not started cold"
            assert finished.returncode == 3 and status["returncode"] == 3, err  # the guard's status file too
            assert status["warm"] is True  # what a resume that adopts the trial from its files reads
            first, *rest = out.splitlines()
            assert rest == ["thread joined", "atexit ran"], out
            assert (tmp_path / f"open-{cuda}").read_text() == "flushed at exit"
            seen.append(json.loads(first))
        (zygote,) = starts.zygotes.values()
        assert zygote.imported == ["numpy"]
        for cuda, trial in zip(("0", "1"), seen, strict=True):
            assert trial["argv"] == [str(script), "3"] and trial["name"] == "__main__"
            assert trial["cwd"] == str(tmp_path) and trial["path0"] == str(script.parent)
            assert trial["cuda"] == cuda and trial["shared"] == "yes"
            assert trial["pgid_is_parent"] and trial["sigint"]  # led by its guard; Ctrl-C as Python sets it
            assert trial["frozen"] > 1000  # the interpreter's imports, out of the trial's collections' way
        assert seen[0]["random"] != seen[1]["random"] and seen[0]["numpy"] != seen[1]["numpy"]  # reseeded

        finished, _, _, err, status = run_trial(starts, script, ["raise"], tmp_path, "2")
        assert finished.returncode == 1 and "ValueError: boom" in err and status["returncode"] == 1

        pidfile = tmp_path / "pid"
        finished, *_ = run_trial(starts, script, ["sleep", str(pidfile)], tmp_path, "3", timeout_s=3)
        assert finished.timed_out and finished.returncode == -signal.SIGTERM
        assert not alive(int(pidfile.read_text())), "a timed-out trial outlived its stop"
    finally:
        starts.close()
    assert zygote.process.poll() is not None, "the warm interpreter outlived its sweep"
    assert starts.summary()["refused"] == []  # ended by close(): no failure of its own


def test_one_warm_interpreter_serves_every_setting_each_fork_reading_its_own(tmp_path, monkeypatch):
    """tune's runs of one session (measure/series.py): the instrumentation is imported in the
    zygote under none of gpuscout's own variables, and each fork reads its run's (tune's settings,
    the steps, the windows) again once it holds the run's environment: one interpreter for a
    session's settings and step counts, none of them leaking from one run into the next."""
    from gpuscout.core.tune_settings import ENV, TuneSettings
    from gpuscout.measure.command import Instrumentation, is_instrumentation_variable

    script = tmp_path / "trial.py"
    script.write_text(
        "import numpy\nimport json\nfrom gpuscout.child import tune_state, watch_state\n"
        "limits = watch_state.LIMITS\n"
        "print(json.dumps([limits.max_steps, limits.window_steps, limits.check_repeats, "
        "tune_state.SETTINGS.jit_compile, tune_state.SETTINGS.batch_size]))\n"
    )
    monkeypatch.chdir(tmp_path)
    asked = [
        ({"GPUSCOUT_WATCH_STEPS": "150", "GPUSCOUT_WATCH_WINDOW_STEPS": "8"}, TuneSettings(jit_compile=True)),
        ({"GPUSCOUT_WATCH_STEPS": "60", "GPUSCOUT_WATCH_REPEATS": "0"}, TuneSettings(batch_size=128)),
        ({}, TuneSettings()),
    ]
    seen = []
    with Instrumentation() as instrumentation:
        starts = warm.WarmStarts(tmp_path, is_instrumentation_variable)
        try:
            for variables, settings in asked:
                env = instrumentation.env(dict(os.environ), {**variables, ENV: settings.to_json()})
                argv = [sys.executable, str(script)]
                starter = starts.starter(argv, env)
                with open(tmp_path / "out", "wb") as out:
                    finished = process.run(argv, env=env, stdout=out, stderr=out, start=starter, timeout_s=60)
                assert finished.returncode == 0 and starter is not None and starter.used, "forked, not cold"
                seen.append(json.loads((tmp_path / "out").read_text().splitlines()[-1]))
            assert len(starts.zygotes) == 1  # one interpreter for the three settings and step counts
        finally:
            starts.close()
    assert seen == [[150, 8, True, True, None], [60, None, False, False, 128], [None, None, True, False, None]]


def test_no_forked_trial_outlives_gpuscout_killed_with_9(tmp_path):
    """gpuscout -> the zygote's guard -> the zygote -> the trial's guard -> the trial: kill -9 at
    the top, and each layer's guard ends the one below."""
    script = tmp_path / "trial.py"
    script.write_text(TRIAL)
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            from pathlib import Path
            from gpuscout.executor import process, warm
            starts = warm.WarmStarts(Path({str(tmp_path)!r}), frozenset().__contains__)
            argv = [sys.executable, {str(script)!r}, "sleep", {str(tmp_path / "pid")!r}]
            process.run(argv, env=dict(os.environ), timeout_s=120, stdout=None, stderr=None,
                        start=starts.starter(argv, dict(os.environ)))
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    trial = int((tmp_path / "pid").read_text())
    assert alive(trial)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while alive(trial) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(trial), "a forked trial outlived gpuscout"


def test_a_trial_whose_warm_interpreter_dies_is_lost_not_failed(tmp_path):
    """The interpreter it was forked from dies under it: the trial ends with it (its guard sees to
    that), is `lost` (gpuscout's failure: sweep/runner.py runs it again cold), and the trials
    after start cold."""
    import psutil

    script = tmp_path / "trial.py"
    script.write_text(TRIAL)
    starts = warm.WarmStarts(tmp_path, frozenset({"CUDA_VISIBLE_DEVICES", "LEFT_OPEN"}).__contains__)
    pidfile = tmp_path / "pid"
    outcome = {}
    runner = threading.Thread(
        target=lambda: outcome.update(
            zip(("finished", "starter"), run_trial(starts, script, ["sleep", str(pidfile)], tmp_path, "0"))
        ),
    )
    try:
        runner.start()
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (zygote,) = starts.zygotes.values()
        (interpreter,) = psutil.Process(zygote.process.pid).children()  # under its guard
        interpreter.kill()
        runner.join(timeout=30)
        assert not runner.is_alive()
        assert outcome["finished"].returncode == -9 and outcome["starter"].lost
        assert not alive(int(pidfile.read_text())), "the trial outlived the interpreter it was forked from"
        argv = [sys.executable, str(script)]
        assert starts.starter(argv, {**os.environ, "SHARED": "yes"}) is None  # the next start cold
        assert starts.summary()["refused"] == ["its interpreter was killed (SIGKILL)"]
    finally:
        starts.close()


ORDER = """import atexit, gc, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
atexit.register(os.write, fd, b"atexit\\n")  # holds nothing of the script's module
class Finaliser:
    def __del__(self):
        os.write(fd, b"finalised\\n")
keep = Finaliser()
gc.set_threshold(1, 1, 1)  # a full collection at nearly every allocation from here on
"""


def test_a_forked_trial_finalises_its_objects_after_its_atexit_handlers(tmp_path):
    """As the interpreter's end orders them: a finaliser that hangs (tensorflow#21277) must not
    keep the exit handlers, gpuscout's exit event among them, from running first."""
    script = tmp_path / "order.py"
    script.write_text(ORDER)
    starts = warm.WarmStarts(tmp_path, frozenset({"CUDA_VISIBLE_DEVICES", "LEFT_OPEN"}).__contains__)
    try:
        for cuda in ("0", "1"):
            finished, starter, *_ = run_trial(starts, script, [str(tmp_path / f"order-{cuda}")], tmp_path, cuda)
            assert finished.returncode == 0 and starter is not None and starter.used
            assert (tmp_path / f"order-{cuda}").read_text() == "atexit\nfinalised\n"
    finally:
        starts.close()


def test_tune_keeps_at_most_its_few_warm_interpreters_and_each_imports_what_earlier_runs_did(tmp_path):
    """tune's series of runs (measure/series.py): a warm interpreter for each environment, at most
    `most` alive (the one used longest ago closed for a new one), each importing the frameworks an
    earlier run said it imported, which the scan of the script's top did not find."""
    script = tmp_path / "train.py"
    script.write_text("import os\nprint(os.getpid())\nimport numpy\n")  # code first: the scan finds nothing
    assert warm_scan.preloads(str(script)) == ([], [])
    starts = warm.WarmStarts(tmp_path, frozenset().__contains__, most=2)
    argv = [sys.executable, str(script)]
    try:
        made = [starts._zygote(argv, {**os.environ, "SETTING": name}, ("numpy",)) for name in ("a", "b")]
        assert [z.imported for z in made] == [["numpy"], ["numpy"]]
        assert starts._zygote(argv, {**os.environ, "SETTING": "a"}, ()) is made[0]  # a used again: b is oldest
        third = starts._zygote(argv, {**os.environ, "SETTING": "c"}, ())
        assert made[1].closed.is_set() and not made[0].closed.is_set() and not third.closed.is_set()
        assert made[1].process.wait(timeout=30) is not None  # its interpreter ended with it
    finally:
        starts.close()


def test_the_settings_applied_as_keras_loads_are_the_childs_keras_hooks():
    """A run with one of these starts cold (measure/series.py): the list is the child's own."""
    from gpuscout.child import applies
    from gpuscout.core.tune_settings import AT_KERAS_IMPORT

    assert {m.__name__.rsplit(".", 1)[1] for m in applies.ON_KERAS} == set(AT_KERAS_IMPORT)


def _zygote_on(sock) -> warm.Zygote:
    """A Zygote whose interpreter is the test: its socket's other end, answered by hand."""
    zygote = warm.Zygote.__new__(warm.Zygote)
    zygote.sock, zygote.lock, zygote.ids = sock, threading.Lock(), iter(range(1, 100))
    zygote.children, zygote.answers, zygote.abandoned = {}, {}, set()
    zygote.changed, zygote.refused, zygote.ready, zygote.died = threading.Condition(), None, {}, False
    zygote.closed, zygote.process = threading.Event(), None
    threading.Thread(target=zygote._read, daemon=True).start()
    return zygote


def test_a_forked_trial_that_ended_before_its_starter_looked_is_never_started_again(tmp_path):
    """Issue 87, item 8's drill (a sweep on a full disk, 2 of 28 tries): a trial that ended at
    once was reaped, and left the zygote's children, before its starter woke; the starter found
    no child, said "not started", and the trial was started cold as well: its side effect done
    twice, both runs' output in one log. The answer carries the child itself, ended or not."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = _zygote_on(ours)
    # the interpreter's answer and the child's end, both read before the starter looks
    theirs.send(json.dumps({"started": 1, "pid": 424242}).encode())
    theirs.send(json.dumps({"exited": 424242, "status": 0}).encode())
    with zygote.changed:
        assert zygote.changed.wait_for(lambda: 1 in zygote.answers and not zygote.children, 60)
    out = (tmp_path / "out.log").open("w")
    child = zygote.start(["python", "train.py"], {}, out, out, out.fileno(), None)
    assert child is not None and child.pid == 424242 and child.poll() == 0  # forked, and ended: once
    message, fds, _, _ = socket.recv_fds(theirs, 1 << 16, 8)  # the request was made, with its files
    assert json.loads(message)["start"] == 1 and len(fds) == 3
    for fd in fds:
        os.close(fd)
    # a request the zygote refused: None, so the starter starts it cold (it was never forked)
    theirs.send(json.dumps({"started": 2, "error": "no"}).encode())
    assert zygote.start(["python", "train.py"], {}, out, out, out.fileno(), None) is None
    zygote.closed.set()
    ours.close()
    theirs.close()
