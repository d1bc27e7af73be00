"""`gpuscout bench --to-accuracy`: real data (the handwritten digits gpuscout ships), real training, on the CPU."""

import json

import pytest

from tests.conftest import run_cli
from tests.data_files import write_cifar_dir

pytestmark = pytest.mark.slow


def test_mlp_reaches_90_percent_on_digits_and_the_curve_is_stored(store_path):
    proc = run_cli(
        "bench",
        "mlp",
        "--to-accuracy",
        "0.9",
        "--dataset",
        "digits",
        "--batch-size",
        "64",
        "--max-epochs",
        "10",
        "--cpu",
        "--backend",
        "jax",
        "--json",
        "--store",
        str(store_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = json.loads(proc.stdout)["runs"][0]
    tta = run["time_to_accuracy"]
    assert run["status"] == "ok" and tta["reached"] and tta["dataset"] == "digits"
    assert tta["train_samples"] == 1438 and tta["val_samples"] == 359  # a fifth of each class, rounded
    assert tta["curve"][-1]["val_accuracy"] >= 0.9 > max([p["val_accuracy"] for p in tta["curve"][:-1]] + [0])
    assert tta["seconds"] == tta["curve"][-1]["elapsed_s"] > 0
    shown = run_cli("results", "show", run["id"], "--store", str(store_path))
    assert "reached 0.9 in" in shown.stdout and "validation accuracy by epoch" in shown.stdout


def test_a_target_not_reached_is_recorded_as_such_and_exits_1(tmp_path, store_path):
    cifar = write_cifar_dir(tmp_path / "cifar")  # random labels: nothing to learn
    proc = run_cli(
        "bench",
        "mlp",
        "--to-accuracy",
        "0.99",
        "--dataset",
        str(cifar),
        "--max-epochs",
        "2",
        "--batch-size",
        "50",
        "--cpu",
        "--backend",
        "tensorflow",
        "--json",
        "--store",
        str(store_path),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    run = json.loads(proc.stdout)["runs"][0]
    assert run["status"] == "not_reached" and run["time_to_accuracy"]["epochs"] == 2
    assert run["time_to_accuracy"]["train_samples"] == 100 and run["time_to_accuracy"]["augmented"]
    assert "target 0.99" in run["error"]["message"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("mlp", "--to-accuracy", "1.5", "--dataset", "digits"), "--to-accuracy is a validation accuracy in (0, 1]"),
        (("mlp", "--dataset", "digits"), "--dataset is for --to-accuracy runs"),
        (("mlp", "--to-accuracy", "0.9"), "--to-accuracy needs real data"),
        (
            ("gpt2_small", "--to-accuracy", "0.9", "--dataset", "digits"),
            "gpt2_small is not one: it reads token sequences",
        ),
        (("mlp", "--to-accuracy", "0.9", "--dataset", "cifar10"), "CIFAR-10 is not in Keras' cache"),
        (("resnet50", "--to-accuracy", "0.9", "--dataset", "digits", "--max-epochs", "0"), "--max-epochs must be >= 1"),
    ],
)
def test_bad_accuracy_arguments_exit_2(args, message, tmp_path, store_path):
    proc = run_cli("bench", *args, "--cpu", "--store", str(store_path), env={"KERAS_HOME": str(tmp_path)})
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not store_path.exists() or "runs" not in proc.stdout
