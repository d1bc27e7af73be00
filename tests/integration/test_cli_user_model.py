"""`gpuscout bench --model`: a user's file or saved model, end to end on the CPU (jax backend)."""

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import FIXTURES, run_cli

MODELS = FIXTURES / "user_models"
QUICK = ("--cpu", "--backend", "jax", "--windows", "1", "--window-seconds", "0.2", "--warmup-steps", "1", "--json")
pytestmark = pytest.mark.slow


def bench_json(*args, store):
    proc = run_cli("bench", *args, *QUICK, "--store", str(store))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["runs"][0]


def test_a_build_function_is_measured_with_its_counted_flops(store_path):
    run = bench_json("--model", f"{MODELS}/small_cnn.py:build", store=store_path)
    assert run["status"] == "ok" and run["workload"] == "small_cnn.py:build"
    assert run["batch_size"] == 16  # the InputSpec's batch
    # conv: 16*16*8 outputs x 27 MACs, dense: 5 x 8 MACs; x2 FLOPs per MAC, x3 for training
    assert run["training_flops_per_sample"] == 3 * 2 * (16 * 16 * 8 * 27 + 5 * 8)
    info = run["spec"]["model_info"]
    assert info["flops_source"] == "counted" and info["flops_coverage"] == 1.0
    assert run["spec"]["model"]["sha256"] and run["spec"]["model"]["function"] == "build"


def test_multi_head_attention_and_integer_inputs_are_understood(store_path):
    run = bench_json("--model", f"{MODELS}/small_cnn.py:build_text", store=store_path)
    info = run["spec"]["model_info"]
    assert info["vocab_size"] == 100 and info["input_dtype"] == "int32"
    # q, k, v: 3 x 10*8*8 MACs; scores and A.V: 10*10*2*(4+4); output: 10*2*4*8; classifier 3*8
    assert info["forward_flops"] == 2 * (3 * 640 + 1600 + 640 + 24)


def test_a_compiled_regression_model_keeps_its_loss_and_a_flops_override_wins(store_path):
    run = bench_json(
        "--model", f"{MODELS}/small_cnn.py:build_regression", "--flops-per-sample", "1000", store=store_path
    )
    info = run["spec"]["model_info"]
    assert info["label_kind"] == "dense" and info["label_shape"] == [3]
    assert info["flops_source"] == "given" and run["training_flops_per_sample"] == 3000


def test_an_error_in_the_users_file_is_one_line_and_stores_nothing(store_path):
    """One line naming the error and where in the user's file; its traceback with --verbose (the
    user's frames only)."""
    bench_json("mlp", store=store_path)
    before = hashlib.sha256(store_path.read_bytes()).hexdigest()
    proc = run_cli("bench", "--model", f"{MODELS}/broken.py", *QUICK, "--store", str(store_path))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        "error: broken.py:build: NameError: name 'undefined_tensor' is not defined (broken.py line 6, in build)"
    )
    assert "`gpuscout --verbose ...` shows the traceback" in line
    verbose = run_cli("--verbose", "bench", "--model", f"{MODELS}/broken.py", *QUICK, "--store", str(store_path))
    assert verbose.returncode == 2
    assert 'broken.py", line 6, in build' in verbose.stderr and "NameError" in verbose.stderr
    assert "gpuscout/child" not in verbose.stderr  # only the user's frames
    with sqlite3.connect(store_path) as db:
        assert db.execute("select count(*) from runs").fetchone()[0] == 1
    assert hashlib.sha256(store_path.read_bytes()).hexdigest() == before


def test_a_saved_model_with_free_dimensions_needs_and_takes_an_input_shape(tmp_path, store_path):
    saved = tmp_path / "free.keras"
    script = textwrap.dedent(f"""
        import keras
        i = keras.Input((None, None, 3))
        x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(i))
        m = keras.Model(i, keras.layers.Dense(6, activation="softmax")(x))
        m.compile("adam", "sparse_categorical_crossentropy")
        m.save({str(saved)!r})
    """)
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    proc = run_cli("bench", "--model", str(saved), *QUICK, "--store", str(store_path))
    assert proc.returncode == 2 and "pass --input-shape" in proc.stderr.splitlines()[-1]
    run = bench_json(
        "--model", str(saved), "--input-shape", "24,24,3", "--precision", "mixed_bfloat16", store=store_path
    )
    info = run["spec"]["model_info"]
    assert run["status"] == "ok" and info["compute_dtype"] == "bfloat16"
    assert info["forward_flops"] == 2 * (22 * 22 * 4 * 27 + 6 * 4)  # counted on the concrete shape


@pytest.mark.parametrize(
    "args, message",
    [
        (("--model", "nowhere.py:build"), "--model file not found"),
        (("--model", f"{MODELS}/small_cnn.py:build", "--input-shape", "3,3"), "does not match the model's input"),
        (("--model", f"{MODELS}/../fake_worker.py:1build"), "is not a Python function name"),
        (("--model", f"{MODELS}/small_cnn.py", "mlp"), "name workloads or a --model, not both"),
        (("--model", f"{MODELS}/small_cnn.py", "--batch-size", "auto"), "--batch-size auto needs"),
        (("--model", str(FIXTURES / "fake_worker.py").replace(".py", ".txt")), "give a Python file"),
        # found by reading the file in the parent, before a child (it took 37 s and showed gpuscout's frames)
        (("--model", f"{MODELS}/small_cnn.py:buidl"), "no function 'buidl' in it: did you mean build, "),
        (("--model", f"{MODELS}/syntax_error.py"), "--model syntax_error.py line 7: '(' was never closed"),
    ],
)
def test_bad_model_arguments_exit_2_before_anything_runs(args, message, store_path):
    proc = run_cli("bench", *args, "--cpu", "--store", str(store_path))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_raw_bytes_from_a_users_model_are_only_output(store_path):
    """Invalid UTF-8 and a fake event on the child's stdout: the model check accepts the model and
    the run is judged by its events (it used to be stored `failed: exited with code 0 without a
    result`)."""
    run = bench_json("--model", f"{MODELS}/hostile.py:build_noisy", store=store_path)
    assert run["status"] == "ok" and run["throughput"]["median"] > 0 and len(run["windows"]) == 1


def test_timeout_covers_the_model_check_and_takes_the_helpers_along(tmp_path, store_path):
    import os
    import time

    pids = tmp_path / "pids"
    began = time.monotonic()
    proc = run_cli(
        "bench",
        "--model",
        f"{MODELS}/hostile.py:build_hangs",
        "--timeout",
        "20",
        *QUICK,
        "--store",
        str(store_path),
        env={"HOSTILE_PIDS": str(pids)},
        timeout=300,
    )
    took = time.monotonic() - began
    assert proc.returncode == 2 and "timeout" in proc.stderr.lower(), proc.stderr[-2000:]
    assert 20 <= took < 60  # it waited for the build, then stopped at --timeout (not after 600 s)
    for pid in map(int, pids.read_text().split()):  # the build's process and its helper are gone
        try:
            os.kill(pid, 0)
            state = open(f"/proc/{pid}/stat").read().split()[2]
            assert state == "Z", f"pid {pid} outlived the model check"
        except (ProcessLookupError, FileNotFoundError):
            pass
    assert (
        not store_path.exists() or sqlite3.connect(store_path).execute("select count(*) from runs").fetchone()[0] == 0
    )


def test_targets_follow_the_loss_and_to_accuracy_names_its_real_reason(store_path):
    binary = bench_json("--model", f"{MODELS}/small_cnn.py:build_binary", store=store_path)
    info = binary["spec"]["model_info"]
    assert info["label_kind"] == "binary" and info["label_shape"] == [1]
    assert binary["status"] == "ok" and 0 <= binary["loss"] < 5  # cross-entropy of 0/1 targets: never negative
    proc = run_cli(
        "bench",
        "--model",
        f"{MODELS}/small_cnn.py:build_onehot",
        "--to-accuracy",
        "0.5",
        "--dataset",
        "digits",
        *QUICK,
        "--store",
        str(store_path),
    )
    assert proc.returncode == 2 and "its loss trains on one-hot targets" in proc.stderr, proc.stderr[-2000:]


def test_free_input_dimensions_are_built_on_the_given_shape_and_every_flop_counted(store_path):
    run = bench_json("--model", f"{MODELS}/small_cnn.py:build_free_length", store=store_path)
    info = run["spec"]["model_info"]
    # two Conv1D over 24 and 18 positions and the classifier, 2 FLOPs per multiply-add
    assert info["forward_flops"] == 2 * (24 * 7 * 8 * 16 + 18 * 7 * 16 * 16 + 16)
    assert info["flops_coverage"] == 1.0 and info["label_kind"] == "binary" and run["status"] == "ok"
    longer = bench_json("--model", f"{MODELS}/small_cnn.py:build_free_length", "--input-shape", "40", store=store_path)
    assert longer["spec"]["model_info"]["forward_flops"] == 2 * (34 * 7 * 8 * 16 + 28 * 7 * 16 * 16 + 16)


def test_a_build_that_returns_a_bare_model_has_its_spec_inferred(store_path):
    """Issue 29, item 11: as for a saved .keras file, the shape comes from the model's input; a
    spec is asked for only where a dimension is free, naming which; a layer is named as such."""
    run = bench_json("--model", f"{MODELS}/small_cnn.py:build_bare", store=store_path)
    info = run["spec"]["model_info"]
    assert run["status"] == "ok" and info["input_shape"] == [12]
    assert info["forward_flops"] == 2 * (12 * 16 + 16 * 4)
    free = run_cli("bench", "--model", f"{MODELS}/small_cnn.py:build_bare_free", *QUICK, "--store", str(store_path))
    assert free.returncode == 2
    assert "leaves dimension 1 of a sample free: pass --input-shape (e.g. 128,8)" in free.stderr.splitlines()[-1]
    layer = run_cli("bench", "--model", f"{MODELS}/small_cnn.py:build_layer", *QUICK, "--store", str(store_path))
    assert layer.returncode == 2 and len(layer.stderr.strip().splitlines()) == 1
    assert "must return a Keras model, or (model, InputSpec(...)); it returned a Keras layer" in layer.stderr


def test_a_file_that_raises_at_import_and_saved_files_that_are_not_models(tmp_path, store_path):
    """Issue 30, item 5: one line each, exit 2, nothing stored; the .keras checks in milliseconds."""
    raises = tmp_path / "raises.py"
    raises.write_text("raise RuntimeError('no data folder')\n\ndef build():\n    pass\n")
    answer = tmp_path / "answer.py"
    answer.write_text("def build():\n    return 42\n")
    empty, garbage, other_zip = tmp_path / "empty.keras", tmp_path / "garbage.keras", tmp_path / "notes.keras"
    empty.write_bytes(b"")
    garbage.write_bytes(bytes(range(256)) * 4)
    import zipfile

    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("notes.txt", "not a model")
    for args, fragment in (
        ((f"{raises}:build",), "RuntimeError: no data folder (raises.py line 1, at import)"),
        ((f"{answer}:build",), "it returned int"),
        ((str(empty),), "is empty (0 bytes): not a saved Keras model"),
        ((str(garbage),), "is not a saved Keras model: a .keras file is a zip archive"),
        ((str(other_zip),), "without a Keras model in it (no config.json)"),
    ):
        proc = run_cli("bench", "--model", *args, *QUICK, "--store", str(store_path))
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert fragment in line and "Traceback" not in proc.stderr
    assert not store_path.exists()
