"""Watch and tune of a user's script on several devices (issue 48), on a CPU split into two
devices, through the real CLI: the per-device facts watch reads, the verdict on a device left
idle, and tune's data_parallel change injected into the unchanged script and measured."""

from __future__ import annotations

import json
import sys

import pytest

from tests.cli_checks import records
from tests.conftest import FIXTURES, run_cli

PY = sys.executable
TWO_JAX_DEVICES = {
    "KERAS_BACKEND": "jax",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    "TF_CPP_MIN_LOG_LEVEL": "3",
}


@pytest.mark.slow
def test_a_script_on_one_of_two_devices_is_told_and_tuned_and_spread_scripts_are_read(tmp_path):
    script = tmp_path / "train.py"
    script.write_text((FIXTURES / "watch" / "devices.py").read_text())
    store = tmp_path / "results.sqlite"
    tuned = run_cli(
        "tune",
        "--json",
        "--only",
        "data_parallel",
        "--steps",
        "60",
        "--store",
        str(store),
        "--",
        PY,
        str(script),
        "one",
        env=TWO_JAX_DEVICES,
    )
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    report = json.loads(tuned.stdout)
    stored = records(store)
    baseline = stored[report["baseline"]["run_id"]]
    assert (baseline.main.devices, baseline.main.replicas) == (2, 1)
    idle = next(c for c in baseline.verdict if c.code == "devices_unused")
    assert "1 of the 2 devices this process sees sat idle" in idle.message
    rows = {r["change"]: r for r in report["rows"]}
    assert set(rows) == {"data_parallel", "data_parallel_batch"}
    for name, batch in (("data_parallel", 128), ("data_parallel_batch", 256)):
        spread = stored[rows[name]["run_id"]]
        # injected before the first layer: the step ran on both devices, each a share of the global batch
        assert "data_parallel" in spread.applied and "2 devices" in spread.applied["data_parallel"]
        assert (spread.main.replicas, spread.main.strategy, spread.main.batch_size) == (2, "DataParallel", batch)
        assert rows[name]["devices"] == 2 and rows[name]["efficiency"] == pytest.approx(rows[name]["ratio"] / 2)
        assert rows[name]["healthy"], rows[name]
    assert "learning rate" in rows["data_parallel_batch"]["why"]
    # a script that spreads itself: what watch reads and prints
    watched = run_cli(
        "watch", "--steps", "40", "--store", str(store), "--", PY, str(script), "data_parallel", env=TWO_JAX_DEVICES
    )
    assert watched.returncode == 0, watched.stderr[-3000:]
    assert "devices: the step ran on 2 of 2 (DataParallel); batch 128 global, 64 per device" in watched.stdout
    # TensorFlow: a MirroredStrategy injected at the script's first layer, after its own tf.config calls
    tuned = run_cli(
        "tune",
        "--json",
        "--only",
        "data_parallel",
        "--steps",
        "40",
        "--store",
        str(store),
        "--",
        PY,
        str(script),
        "tf_one",
        env={"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    report, stored = json.loads(tuned.stdout), records(store)
    assert (stored[report["baseline"]["run_id"]].main.devices, stored[report["baseline"]["run_id"]].main.replicas) == (
        2,
        1,
    )
    rows = {r["change"]: r for r in report["rows"]}
    for name, batch in (("data_parallel", 128), ("data_parallel_batch", 256)):
        spread = stored[rows[name]["run_id"]]
        assert "MirroredStrategy" in spread.applied["data_parallel"] and "2 devices" in spread.applied["data_parallel"]
        assert (spread.main.replicas, spread.main.strategy, spread.main.batch_size) == (2, "MirroredStrategy", batch)
        assert "devices_unused" not in [c.code for c in spread.verdict]
        assert rows[name]["healthy"] and "with strategy.scope():" in rows[name]["line"], rows[name]
