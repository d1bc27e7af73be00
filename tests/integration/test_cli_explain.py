"""`gpuscout doctor --explain` through the real CLI, on a fake machine (fake NVML and fake
framework build facts: GPUSCOUT_FAKE_PROBES), from a file, a pipe and the command line."""

import json
import os
import subprocess
import sys

import pytest

from tests.cli_checks import machine_env
from tests.conftest import SRC, run_cli
from tests.explain_cases import CASES

LOG = "\n".join(
    [
        "2025-02-04 I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is optimized",
        CASES[2][0],
        CASES[3][0],
        "Traceback (most recent call last):",
        '  File "train.py", line 40, in <module>',
        CASES[7][0],
    ]
)


def test_a_piped_log_gets_every_failure_root_first_with_this_machines_fix(tmp_path, fake_gpu):
    env = dict(os.environ, PYTHONPATH=str(SRC), LD_LIBRARY_PATH="/opt/conda/lib", **machine_env(tmp_path, fake_gpu))
    done = subprocess.run(
        [sys.executable, "-m", "gpuscout", "doctor", "--explain", "-"],
        input=LOG,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("3 known failure(s) in the log, 2 root cause(s) first:")
    numbered = [line for line in out.splitlines() if line[:2] in ("1.", "2.", "3.")]
    assert [line.split("[")[-1] for line in numbered] == [
        "cudnn_version_mismatch]",
        "gpu_oom_tensorflow]",
        "dnn_unavailable]",
    ]
    assert "(follows from 1)" in numbered[2]
    one_line = " ".join(out.split())  # the fix as one text, whatever the terminal did with it
    # this machine: TensorFlow's build, the cuDNN it found, LD_LIBRARY_PATH, the H100 and the other process
    assert 'pip install "tensorflow[and-cuda]==2.18.0"' in one_line and "/opt/conda/lib/libcudnn.so.9" in one_line
    assert "take the older cuDNN off LD_LIBRARY_PATH (/opt/conda/lib)" in one_line
    assert "has 80.00 GiB; other processes hold 20.00 GiB of it (pids 777)" in one_line
    assert "line 2: E0000" in one_line


def test_a_file_as_json_with_the_run_named_gets_the_batch_that_fits(tmp_path, fake_gpu):
    log = tmp_path / "train.log"
    log.write_text(CASES[8][0] + "\n")
    result = run_cli(
        "doctor",
        "--explain",
        str(log),
        "--workload",
        "resnet50",
        "--batch-size",
        "1024",
        "--json",
        env=machine_env(tmp_path, fake_gpu),
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["recognised"] and doc["lines"] == 2 and doc["doctor"]["driver_version"] == "550.54.15"
    (found,) = doc["explanations"]
    assert found["code"] == "gpu_oom_xla" and "the allocation that failed: 4.44 GiB" in found["fix"]
    assert "resnet50 at fp32: batch" in found["fix"] and "the run asked for 1024" in found["fix"]


def test_one_line_an_unknown_error_and_bad_input(tmp_path, fake_gpu):
    env = machine_env(tmp_path, fake_gpu)
    line = run_cli("doctor", "--explain", CASES[4][0], env=env)
    assert line.returncode == 0 and "driver 550.54.15 supports CUDA up to 12.4" in " ".join(line.stdout.split())
    unknown = run_cli("doctor", "--explain", "KeyError: 'labels'", env=env)
    assert unknown.returncode == 0
    assert unknown.stdout.startswith(
        "no known failure in the 1 line(s) read; this machine as doctor sees it, its frameworks not started:"
    )
    assert "gpuscout doctor — Python" in unknown.stdout  # doctor's summary instead of a guess
    # explained first, from what is cheap to know: no framework is started for a cause that needs none
    # (issue 79, item 10: 17-27 s and 825 MB for any log), nor for an empty one; one whose fix names
    # the framework's build starts them
    piped = dict(os.environ, PYTHONPATH=str(SRC), **env)
    for log, started in (("KeyError: 'labels'", False), ("", False), (CASES[2][0], True)):
        done = subprocess.run(
            [sys.executable, "-m", "gpuscout", "doctor", "--explain", "-", "--json"],
            input=log,
            capture_output=True,
            text=True,
            env=piped,
            timeout=300,
        )
        told = json.loads(done.stdout)
        assert told["doctor"]["started"] is started, (log, told["doctor"]["checks"])
        statuses = {c["status"] for c in told["doctor"]["checks"] if c["name"] == "tensorflow"}
        assert (statuses == {"skip"}) is not started, statuses
    missing = run_cli("doctor", "--explain", str(tmp_path / "nope.log"), env=env)
    assert (
        missing.returncode == 2 and "no such file" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    )
    stray = run_cli("doctor", "--batch-size", "64", env=env)
    assert stray.returncode == 2 and "add --explain" in stray.stderr


def test_a_loaders_named_dependency_and_a_failed_download_through_the_cli(tmp_path, fake_gpu):
    """Issue 29, item 12, as a user pastes it: the library the loader could not open is the one
    blamed, and a failed dataset download says where Keras would read the file by hand."""
    env = {**machine_env(tmp_path, fake_gpu), "KERAS_HOME": str(tmp_path / "keras")}
    log = (
        "Could not load library libcudnn_ops_infer.so.8. Error: libcublas.so.11: cannot open shared object "
        "file: No such file or directory\nException: URL fetch failure on "
        "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz: None -- [Errno -3] Temporary "
        "failure in name resolution"
    )
    result = subprocess.run(
        [sys.executable, "-m", "gpuscout", "doctor", "--explain", "-", "--json"],
        input=log,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC), **env),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = {e["code"]: e for e in json.loads(result.stdout)["explanations"]}
    assert set(found) == {"library_dependency_missing", "download_failed"}
    assert "libcublas.so.11 is the missing one" in found["library_dependency_missing"]["cause"]
    assert f"{tmp_path / 'keras'}/datasets/mnist.npz" in found["download_failed"]["fix"]


def _cases_of(log: str) -> dict[str, str]:
    """Each case's part of the log keras_errors.py printed, by case name."""
    parts, name, lines = {}, None, []
    for line in log.splitlines():
        if line.startswith("=== end "):
            parts[name] = "\n".join(lines)
            name, lines = None, []
        elif line.startswith("=== "):
            name, lines = line[4:], []
        elif name is not None:
            lines.append(line)
    return parts


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_errors_keras_users_paste_made_for_real_are_each_explained_with_their_line(tmp_path, fake_gpu, backend):
    """Issue 78: every mistake tests/fixtures/explain/keras_errors.py makes with the installed Keras on
    this backend, its traceback as Python printed it, piped to `doctor --explain -`: its own family
    named with its cause and a fix, and the line of the script the traceback points at (where the
    error has a traceback); a message that drifts in a new Keras fails here first."""
    from tests.conftest import FIXTURES

    script = FIXTURES / "explain" / "keras_errors.py"
    made = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    cases = _cases_of(made.stderr)
    expected = _expected()
    assert cases and set(cases) <= set(expected), sorted(cases)
    env = dict(os.environ, PYTHONPATH=str(SRC), **machine_env(tmp_path, fake_gpu))
    for name, log in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "gpuscout", "doctor", "--explain", "-", "--json"],
            input=log,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, (name, done.stderr)
        found = {e["code"]: e for e in json.loads(done.stdout)["explanations"]}
        assert expected[name] in found, (name, sorted(found), log[-600:])
        explained = found[expected[name]]
        assert explained["cause"] and "<" not in explained["cause"] and explained["fix"], (name, explained)
        warning = "Warning: " in explained["evidence"]  # a warning has no traceback to point into
        if "Traceback" in log and not warning and name != "custom_object_unknown":
            assert "keras_errors.py:" in explained["fix"], (name, explained["fix"])  # the script's own line


def _expected() -> dict[str, str]:
    import ast

    from tests.conftest import FIXTURES

    # the fixture's table alone, read without running the script (which imports Keras)
    text = (FIXTURES / "explain" / "keras_errors.py").read_text()
    start = text.index("EXPECTED = {")
    table = text[start : text.index("}\n", start) + 1]
    return ast.literal_eval(table.split("=", 1)[1].strip())
