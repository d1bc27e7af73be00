"""`gpuscout sweep --executor ray --address HOST:PORT` against a real two-node Ray cluster on this
machine (`ray start --head` and a second `ray start --address`, CPU resources): trials spread
over both nodes, the second node killed with kill -9 in the middle of a trial (retried on the
head, none lost or run twice, the driver names the node that died), and an address nobody
answers at."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_cli
from tests.sweep_files import trials, write

pytestmark = pytest.mark.slow
SECOND = "gpuscout_second_node"  # a custom resource that tells the second node's raylet apart
# A local test cluster without token authentication (Ray's `ray start` may default to it)
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(*args: str) -> subprocess.CompletedProcess:
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    return subprocess.run([ray, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **RAY_ENV})


@pytest.fixture
def cluster():
    pytest.importorskip("ray")
    port = free_port()
    head = ray_cli(
        "start", "--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard=false", "--disable-usage-stats"
    )
    try:
        if head.returncode != 0:
            pytest.skip(f"Ray cannot start a head node here: {head.stderr.strip().splitlines()[-1:]}")
        node = ray_cli(
            "start",
            "--address",
            f"127.0.0.1:{port}",
            "--num-cpus",
            "1",
            "--resources",
            json.dumps({SECOND: 1}),
            "--disable-usage-stats",
        )
        if node.returncode != 0:
            pytest.skip(f"Ray cannot start a second node here: {node.stderr.strip().splitlines()[-1:]}")
        yield f"127.0.0.1:{port}"
    finally:
        ray_cli("stop", "--force")


def second_raylet() -> psutil.Process:
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "raylet/raylet" in cmd and SECOND in cmd:
            return p
    raise AssertionError("no raylet of the second node")


def test_a_sweep_on_a_two_node_ray_cluster_survives_a_node_killed_mid_trial(cluster, tmp_path, store_path):
    def sleeper(name: str, seconds: float):
        return write(
            tmp_path,
            f"""
            name: {name}
            command: {
                json.dumps(
                    f'{sys.executable} -c "import json, time; time.sleep({seconds}); '
                    f"print(json.dumps({{{{'score': {{x}}}}}}))" + '"'
                )
            }
            reports: [score]
            metric: {{name: score, direction: max}}
            space: {{x: [1, 2, 3, 4]}}
        """,
            name=f"{name}.yaml",
        )

    env = {**RAY_ENV, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    spread = run_cli(
        "sweep",
        str(sleeper("spread", 2)),
        "--executor",
        "ray",
        "--address",
        cluster,
        "--cpu-slots",
        "2",
        "--json",
        "--store",
        str(store_path),
        env=env,
        timeout=300,
    )
    assert spread.returncode == 0, spread.stderr[-3000:]
    summary = json.loads(spread.stdout)  # Ray's own messages never reach stdout
    assert summary["status_counts"]["ok"] == 4
    nodes = {r["slot"].split(":")[1] for _, _, r in trials(store_path)}
    assert len(nodes) == 2  # each trial's node is kept: both nodes ran trials
    # a second sweep; once both nodes run a trial, the second node dies (kill -9 of its raylet)
    sweep = sleeper("killed", 8)
    from tests.conftest import SRC

    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscout",
            "sweep",
            str(sweep),
            "--executor",
            "ray",
            "--address",
            cluster,
            "--cpu-slots",
            "2",
            "--json",
            "--store",
            str(store_path),
        ],
        env={**os.environ, **env, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    logs = store_path.parent / "sweeps" / "killed"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list(logs.glob("trial-*/stdout-1.log"))) < 2:
        time.sleep(0.2)
    assert len(list(logs.glob("trial-*/stdout-1.log"))) >= 2, "the trials never started on both nodes"
    victim = second_raylet()
    victim.kill()
    out, err = driver.communicate(timeout=240)
    assert driver.returncode == 0, err[-3000:]
    summary = json.loads(out)
    rows = [(s, r) for k, s, r in trials(store_path) if r and r["log_dir"].startswith(str(logs))]
    assert len(rows) == 4 and all(s == "ok" for s, _ in rows)  # none lost, none stored twice
    assert sorted(r["metrics"]["score"] for _, r in rows) == [1, 2, 3, 4]
    rerun = [r for _, r in rows if (Path(r["log_dir"]) / "stdout-2.log").exists()]
    assert len(rerun) == 1  # the trial the dead node ran, run again on the head: once more, not twice
    died = [n for n in summary["notes"] if "died" in n]
    assert len(died) == 1 and died[0].startswith("Ray node ") and "run again on the others" in died[0]
    assert died[0].split()[2] in nodes  # the node it names is one the trials ran on
    assert "note: Ray node" in err
    left = [p for p in psutil.process_iter(["cmdline"]) if "time.sleep(8)" in " ".join(p.info["cmdline"] or [])]
    assert not left  # the dead node's trial did not outlive it


def test_an_address_nobody_answers_at_is_one_line_within_seconds(tmp_path, store_path):
    pytest.importorskip("ray")
    sweep = write(
        tmp_path,
        """
        name: nowhere
        command: echo {x}
        reports: [score]
        metric: {name: score}
        space: {x: [1]}
    """,
    )
    port = free_port()
    started = time.monotonic()
    done = run_cli(
        "sweep",
        str(sweep),
        "--executor",
        "ray",
        "--address",
        f"127.0.0.1:{port}",
        "--cpu-slots",
        "1",
        "--store",
        str(store_path),
    )
    assert time.monotonic() - started < 30
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"nobody answers at 127.0.0.1:{port}" in lines[0] and "ray start --head" in lines[0]
