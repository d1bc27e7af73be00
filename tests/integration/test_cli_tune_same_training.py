"""Issue 74 on real Keras runs: a change that alters the training is seen as such (more steps an
epoch from steps_per_execution on an endless generator and a repeat()ed tf.data dataset, more
validation steps, batches no longer reshuffled), device batches keep fit's, and tune's patch of
steps_per_execution on a generator of 40 steps an epoch keeps 40 (the CPU case the issue names)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from gpuscout.tune import same_training
from tests.cli_checks import records
from tests.conftest import FIXTURES, run_cli

PY = sys.executable
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def watched(tmp_path, mode: str, steps: int, backend: str = "jax", change: dict | None = None):
    """A watch of tune_me.py in `mode` for `steps` steps (whole epochs of 64 or 40 before it): through
    the CLI, or, with `change`, injected as tune injects it (the parent's watch_command with the
    change's settings: a user's environment never carries them, issue 87): its stored record."""
    script = tmp_path / "train.py"
    if not script.exists():
        script.write_text((FIXTURES / "watch" / "tune_me.py").read_text())
    store = tmp_path / f"{mode}-{len(list(tmp_path.glob('*.sqlite')))}.sqlite"
    if change:
        return _injected(store, [PY, str(script), mode], steps, backend, change)
    env = {"KERAS_BACKEND": backend, **QUIET}
    done = run_cli("watch", "--steps", str(steps), "--store", str(store), "--", PY, str(script), mode, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records(store).values()
    return record


def _injected(store, argv: list[str], steps: int, backend: str, change: dict):
    from gpuscout.measure import engine
    from gpuscout.measure.command import resolve
    from gpuscout.measure.watching import WatchOptions, watch_command
    from gpuscout.report.watch_live import view_for
    from gpuscout.store import Store
    from gpuscout.telemetry.nvml import Nvml

    options = WatchOptions(steps=steps, change="injected", change_settings=change)
    with pytest.MonkeyPatch.context() as env, Nvml() as nvml, Store(store) as opened:
        env.setenv("KERAS_BACKEND", backend)
        env.setenv("TF_CPP_MIN_LOG_LEVEL", QUIET["TF_CPP_MIN_LOG_LEVEL"])
        record = watch_command(resolve(argv), options, engine.Session(nvml), opened, view_for(True, True))
    assert record.ok, record.error
    return record


@pytest.mark.slow
def test_steps_per_execution_that_does_not_tile_the_epoch_is_another_training(tmp_path):
    """40 steps an epoch from a generator that never ends, validated on 10: at 32 a call Keras trains
    64 and validates on 32 (trainers/epoch_iterator.py), at 10 it keeps both; the repeat()ed tf.data
    dataset on TensorFlow likewise (its input read inside the compiled loop: counted whole)."""
    plain = watched(tmp_path, "steps40", 210)
    assert [e.steps for e in plain.main.epochs] == [40] * 5 and {e.validation_steps for e in plain.main.epochs} == {10}
    coarse = watched(tmp_path, "steps40", 210, change={"steps_per_execution": 32})
    assert [e.steps for e in coarse.main.epochs] == [64] * 3
    assert same_training.differences([coarse], [plain]) == [
        "trains 64 steps an epoch where the script trains 40",
        "sees 4,096 samples an epoch where the script sees 2,560",
        "validates on 32 batches an epoch where the script validates on 10",
    ]
    tiled = watched(tmp_path, "steps40", 210, change={"steps_per_execution": 10})
    assert same_training.differences([tiled], [plain]) == []
    script_run = watched(tmp_path, "repeat40", 210, backend="tensorflow")
    repeated = watched(tmp_path, "repeat40", 210, backend="tensorflow", change={"steps_per_execution": 32})
    assert [e.steps for e in repeated.main.epochs] == [64] * 3
    # its samples are not counted (read inside the compiled loop, of a batch the spec leaves open): its steps are
    assert same_training.differences([repeated], [script_run]) == [
        "trains 64 steps an epoch where the script trains 40"
    ]


@pytest.mark.slow
def test_batches_no_longer_reshuffled_are_seen_and_device_batches_keep_fit_s(tmp_path):
    """fit(x, y) reshuffles each epoch: its epochs begin with other batches. A run that feeds them
    in order (shuffle=False, standing for a change that dropped the shuffle) is another training;
    device batches (jax, here on the CPU) reshuffle as fit does, 64 steps an epoch of 4,096 samples."""
    script_runs = [watched(tmp_path, "other", 200) for _ in range(2)]
    marks = [e.first_batch for e in script_runs[0].main.epochs]
    assert len(set(marks)) == 3 and marks == [e.first_batch for e in script_runs[1].main.epochs]  # seeded
    ordered = watched(tmp_path, "ordered", 200)
    assert same_training.differences([ordered], script_runs) == [
        "feeds its batches in the same order every epoch where the script's are reshuffled each epoch",
        "its first batch holds other samples than the script's (the same in each of its 2 runs)",
    ]
    sliced = watched(tmp_path, "other", 200, change={"device_batches": True})
    assert "device_batches" in sliced.applied and "shuffle=True" in sliced.applied["device_batches"]
    assert sliced.main.input_type == "generator"  # the arrays moved to the device once, fed in device slices
    assert [e.steps for e in sliced.main.epochs] == [64] * 3 and {e.samples for e in sliced.main.epochs} == {4096}
    assert same_training.differences([sliced], script_runs, same_training.Declared(draws=True)) == []


def test_a_tf_data_pipeline_is_autotuned_and_prefetched_where_prefetch_is_asked(tmp_path):
    """prefetch on a tf.data input (TensorFlow injects a prefetch of its own by default: what this
    buys is tune's to measure): the pipeline fit reads is the script's, autotuned, its maps parallel
    and in order, prefetched, and the run trains through it."""
    tuned = watched(tmp_path, "tfdata", 64, backend="tensorflow", change={"prefetch": True})
    assert tuned.applied["prefetch"].startswith("fit(tuned_pipeline(dataset), ...)"), tuned.applied
    assert tuned.main.input_type == "tf.data" and tuned.main.steps >= 64 and tuned.ok


@pytest.mark.slow
def test_tune_s_patch_of_steps_per_execution_keeps_forty_steps_an_epoch(tmp_path):
    """The issue's CPU case: a generator-fed script with steps_per_epoch=40 tuned with --only
    steps_per_execution keeps 40 steps an epoch in its patch: the values tried divide 40 and the
    validation's 10, every run trains whole epochs of 40, and the patched copy, run plain, trains
    40 steps and validates on 10 an epoch."""
    script = tmp_path / "train.py"
    script.write_text((FIXTURES / "watch" / "tune_me.py").read_text())
    store, patch = tmp_path / "results.sqlite", tmp_path / "spe.patch"
    result = run_cli(
        "tune",
        "--json",
        "--only",
        "steps_per_execution",
        "--steps",
        "2000",
        "--patch",
        str(patch),
        "--store",
        str(store),
        "--",
        PY,
        str(script),
        "steps40",
        env={"KERAS_BACKEND": "jax", **QUIET},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert {r["change"] for r in report["rows"]} == {"steps_per_execution_5", "steps_per_execution_10"}
    assert report["epoch_steps"] == 40 and report["steps"] == 2000  # fifty whole epochs a run
    stored = records(store)
    for r in stored.values():
        assert {e.steps for e in r.main.epochs} == {40} and {e.validation_steps for e in r.main.epochs} == {10}
    assert all(not row.get("changes_training") and row["training_checked"] for row in report["rows"])
    if report["best"] is None or not report["best"].get("kept"):  # a noisy host: nothing kept, nothing patched
        pytest.skip(f"no steps_per_execution was kept on this host: {report['summary']}")
    value = int(re.search(r"steps_per_execution=(\d+)", patch.read_text()).group(1))
    assert 40 % value == 0 and 10 % value == 0
    copy = stored[report["patched"]["run_id"]]
    assert copy.applied == {} and copy.main.steps_per_execution == value
    assert [e.steps for e in copy.main.epochs] == [40] * 50 and report["patched"]["epoch_steps"] == 40
