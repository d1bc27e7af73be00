"""What the CLI tests share: running gpuscout and reading what it said (one error line, exit 2),
the environment of its children, the records a session stored, and the drills' cases."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscout.store import Store
from tests.conftest import FIXTURES, SRC, alive, run_cli

PY = sys.executable
FAKE_WORKER = f"{sys.executable} {FIXTURES / 'fake_worker.py'}"  # a measuring child that scripts its end
PROBES = {
    "tensorflow": {
        "backend_version": "2.18.0",
        "cuda_version": "12.5.1",
        "cudnn_version": "9",
        "built_with_cuda": True,
        "gpus": ["NVIDIA H100 80GB HBM3"],
        "xla_ok": True,
        "error": None,
        "cuda_archs": ["sm_60", "sm_70", "sm_80", "compute_90"],
        "cudnn_paths": ["/opt/conda/lib/libcudnn.so.9"],
    },
    "jax": None,
}


def one_line_exit_2(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


def records(store):
    with Store(store, create=False) as s:
        return {r.id: r for r in s.list(kind="watch")}


def one_error_line(result, fragment):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


def recommend_from_watched(store_path: Path, fed, waited) -> None:
    """Called by test_cli_watch.py with its real Keras records: `fed` on a fake H100 (NVML says
    98% busy), `waited` on this CPU, starved by a slow generator."""
    done = run_cli("recommend", "--from", waited.id, "--json", "--store", str(store_path))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["from"]["split"]["input_share"] == pytest.approx(waited.input_wait_share)
    assert doc["epochs"] == 4 and doc["job"]["dataset_units"] == 16 * 64  # fit's plan: 4 x 16 steps of 64
    cap = doc["from"]["input_cap_samples_per_s"]
    assert all(r["throughput"]["value"] <= cap * 1.0001 for r in doc["rows"] if r["throughput"])
    assert "waiting for input" in doc["from"]["fix_first"]
    fed_doc = json.loads(run_cli("recommend", "--from", fed.id, "--json", "--store", str(store_path)).stdout)
    assert fed_doc["from"]["gpu"] == "h100_sxm"
    # NVML's 98% busy, but never more than the step's time not spent waiting or between steps
    in_step = 1 - (fed.input_wait_share or 0) - (fed.outside_step_share or 0)
    assert fed_doc["from"]["split"]["gpu_share"] == pytest.approx(min(0.98, in_step))
    h100 = next(r for r in fed_doc["rows"] if r["gpu"] == "h100_sxm")
    # recommend prices the steps (scaled by the GPU) and the epoch's validation and host time apart:
    # its throughput is the steps' own, the windows' figure
    measured = h100["throughput"]
    assert measured["basis"] == "measured" and measured["value"] == pytest.approx(fed.windows_samples_per_s)
    # NVML's figure was JAX's preallocation: the memory is said to be unknown, not taken from it
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in fed_doc["job"]["memory_basis"]


def until_loop_step(proc: subprocess.Popen, steps: int, deadline_s: float = 120) -> None:
    """Read a watched `loop.py forever` until it has printed `step N` for N >= `steps` (its windows
    then measured, on a machine of any pace), failing past the deadline: a condition, not a time."""
    import time

    deadline = time.monotonic() + deadline_s
    for line in proc.stdout:
        assert time.monotonic() < deadline, f"loop.py printed no step {steps} in {deadline_s:.0f} s"
        if line.startswith("step ") and int(line.split()[1]) >= steps:
            return
    raise AssertionError(f"the watch ended before loop.py's step {steps}")


def machine_env(tmp_path, fake_gpu, **extra):
    probes = tmp_path / "probes.json"
    probes.write_text(json.dumps(PROBES))
    nvml = fake_gpu(processes=[{"pid": 777, "used_memory_bytes": 20 * 2**30}])
    return {"GPUSCOUT_FAKE_NVML": str(nvml), "GPUSCOUT_FAKE_PROBES": str(probes), "COLUMNS": "", **extra}


QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def stored(store_path: Path):
    with Store(store_path, create=False) as store:
        return store.list(kind="watch")


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cases(cases: list[list[str] | dict], tmp_path, env: dict | None = None) -> list[dict]:
    """Each command line's exit code, stdout, stderr and seconds, all in one fresh interpreter (a
    case is its arguments, or tests/fixtures/cli_cases.py's dict of them)."""
    listing = tmp_path / "cases.json"
    listing.write_text(json.dumps([case if isinstance(case, dict) else {"args": case} for case in cases]))
    full_env = dict(os.environ, COLUMNS="", PYTHONPATH=str(SRC), **(env or {}))
    full_env.pop("GPUSCOUT_FAKE_NVML", None)
    proc = subprocess.run(
        [PY, str(FIXTURES / "cli_cases.py"), str(listing)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def refused(result: dict, fragment: str) -> None:
    """Exit 2, one line on stderr that starts `error:` and says `fragment`, at once."""
    lines = result["stderr"].strip().splitlines()
    assert result["code"] == 2, result
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], (result["args"], lines)
    assert result["seconds"] < 10, result["args"]


def cli_env(tmp_path, **extra):
    env = dict(
        os.environ,
        COLUMNS="",
        GPUSCOUT_WORKER=FAKE_WORKER,
        FAKE_PIDS=str(tmp_path / "pids"),
        PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p),
    )
    env.pop("GPUSCOUT_FAKE_NVML", None)
    env.update(extra)
    return env


def gpuscout(args, env, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def gone(pid):
    return not alive(pid)


def gone_within(pids, seconds: float = 10) -> bool:
    """Whether every pid has ended before the deadline (waited for, not slept on: a process is
    reaped when its parent gets to it, later on a slow machine)."""
    import time

    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def in_terminal(*args: str, columns: int = 80) -> str:
    """gpuscout's output on a terminal `columns` wide (a pseudo-terminal, as a user's shell gives)."""
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import SRC

    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns), LINES="50", TERM="dumb", PYTHONPATH=str(SRC))
    proc = subprocess.Popen([sys.executable, "-m", "gpuscout", *args], stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def browser() -> str:
    """Chromium's path; a failure naming how to get it where there is none (the README's test
    command installs it; GPUSCOUT_SKIP_BROWSER=1 skips instead)."""
    import shutil

    found = next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)
    if found is None:
        if os.environ.get("GPUSCOUT_SKIP_BROWSER") == "1":
            pytest.skip("GPUSCOUT_SKIP_BROWSER=1 and no Chromium")
        pytest.fail("no Chromium: run `python3 scripts/ensure_browser.py` (the README's test command does)")
    return found


BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def opened_in_browser(page: Path, profile: Path, budget_ms: int = 5000) -> tuple[int, subprocess.CompletedProcess]:
    """A report opened in headless Chromium at 1280 px: its own self-check read from the DOM (every
    plot drawn, no script error, no horizontal scroll, no label on another, no tick label twice);
    the number of plots, and the run (its DOM and stderr)."""
    import re

    flags = [*BROWSER_FLAGS, f"--virtual-time-budget={budget_ms}", f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [browser(), *flags, "--enable-logging=stderr", "--v=0", "--window-size=1280,4000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    expected = re.search(r'data-plots-expected="(\d+)"', dom.stdout)
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom.stdout)
    assert expected and rendered, "the report's self-check did not run"
    assert rendered.group(1) == expected.group(1), (expected.group(1), rendered.group(1))
    assert re.search(r'<pre id="js-errors"></pre>', dom.stdout), "a script error was caught on the page"
    layout = re.search(r'<pre id="layout" hidden="">(.*?)</pre>', dom.stdout, re.S)
    for check in ("horizontal-scroll", "label-overlaps", "repeated-ticks"):
        found = re.search(rf'data-{check}="(\d+)"', dom.stdout)
        assert found and found.group(1) == "0", (check, layout and layout.group(1)[:2000])
    assert not re.search(r"Uncaught|CONSOLE\(\d+\).*[Ee]rror", dom.stderr)
    return int(expected.group(1)), dom
