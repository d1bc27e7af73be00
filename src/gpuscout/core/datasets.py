"""Real datasets for time-to-accuracy runs: found in the parent, loaded in the child (numpy only).

- `cifar10`: from Keras' dataset cache, where `keras.datasets.cifar10.load_data()` leaves it
  ($KERAS_HOME or ~/.keras, `datasets/cifar-10-batches-py-target/cifar-10-batches-py`, or
  `datasets/cifar-10-batches-py` from older Keras). gpuscout never downloads it itself: a
  benchmark must not depend on a network, and a missing cache is an error that says how to
  fill it.
- `mnist`: Keras' cache, `datasets/mnist.npz`.
- `digits`: the handwritten digits scikit-learn ships (1,797 8x8 images of 17 grey levels; the
  UCI "Optical Recognition of Handwritten Digits" test set, CC BY 4.0, Alpaydin and Kaynak 1998),
  shipped here as `digits.npz` (45 kB) so that no one installs scikit-learn for them (its import
  also cost every Keras process 0.75 s: Keras imports it wherever it is installed), split 80/20 per
  class with a fixed seed: small enough for tests on a CPU.
- a path: an `.npz` file with x_train, y_train and x_test (or x_val), y_test (or y_val); or a
  directory in CIFAR-10's python format (data_batch_1..5, test_batch).

Images are fitted to the workload's input (nearest-neighbour resize, grey to colour by
repetition) and standardised with the training set's per-channel mean and deviation.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscout.core.errors import UsageError

NAMES = ("cifar10", "mnist", "digits")
SPLIT_SEED = 0
VAL_SHARE = 0.2


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    augment: bool  # random flips and shifts suit natural images, not digits


def keras_home() -> Path:
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")


def _cifar_dirs() -> list[Path]:
    base = keras_home() / "datasets"
    return [base / "cifar-10-batches-py-target" / "cifar-10-batches-py", base / "cifar-10-batches-py"]


def locate(name_or_path: str) -> str:
    """The dataset as the child will load it (a name or an absolute path); exit 2 when absent."""
    if name_or_path == "digits":
        return "digits"
    if name_or_path == "cifar10":
        found = next((d for d in _cifar_dirs() if (d / "test_batch").is_file()), None)
        if found is None:
            raise UsageError(
                f"CIFAR-10 is not in Keras' cache ({_cifar_dirs()[0]}): on a machine with network run "
                '`python -c "import keras; keras.datasets.cifar10.load_data()"` (and copy ~/.keras/datasets '
                "here), or pass --dataset DIR (CIFAR-10's python batches) or FILE.npz"
            )
        return str(found)
    if name_or_path == "mnist":
        path = keras_home() / "datasets" / "mnist.npz"
        if not path.is_file():
            raise UsageError(
                f"MNIST is not in Keras' cache ({path}): on a machine with network run "
                '`python -c "import keras; keras.datasets.mnist.load_data()"`, or pass --dataset FILE.npz'
            )
        return str(path)
    path = Path(name_or_path).expanduser()
    if path.suffix == ".npz" and path.is_file():  # a regular file: a FIFO or a device is no dataset
        try:  # only the archive's directory is read here (its end): a dataset of any size is checked at once
            with np.load(path) as archive:
                files = list(archive.files)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise UsageError(f"--dataset {path} is not a readable .npz archive ({str(exc)[:120]})") from None
        missing = [k for k in ("x_train", "y_train") if k not in files]
        if missing or not ({"x_test", "x_val"} & set(files)):
            raise UsageError(
                f"{path} must hold x_train, y_train and x_test/y_test (or x_val/y_val); it has {', '.join(files)}"
            )
        return str(path.resolve())
    if path.is_dir() and (path / "test_batch").is_file():
        return str(path.resolve())
    raise UsageError(
        f"unknown --dataset {name_or_path!r}: use {', '.join(NAMES)}, a .npz file or a "
        "directory of CIFAR-10 python batches"
    )


def sample_shape(located: str) -> tuple[int, ...]:
    """One training sample's shape, without loading the whole dataset where it can be avoided."""
    if located == "digits":
        return (8, 8)
    path = Path(located)
    if path.is_dir():
        return (32, 32, 3)
    with np.load(path, mmap_mode="r") as archive:
        return tuple(archive["x_train"].shape[1:])


def check_fits(located: str, input_shape: tuple[int, ...], workload_name: str) -> None:
    """Exit 2 when the dataset's samples cannot be shaped for the model's input."""
    try:
        fit_to(np.zeros((1, *sample_shape(located)), dtype=np.uint8), input_shape)
    except ValueError as exc:
        raise UsageError(f"--dataset {Path(located).name}: {exc} ({workload_name})") from None


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digit images (uint8, 0..16) and their labels (0..9)."""
    with np.load(Path(__file__).with_name("digits.npz")) as archive:
        return archive["images"], archive["target"].astype(np.int64)


def stratified_val(labels: np.ndarray, share: float, seed: int) -> np.ndarray:
    """A mask of the validation samples: `share` of each class (rounded), drawn with `seed`, so that
    both sides hold the classes in the same proportions."""
    rng, val = np.random.default_rng(seed), np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        val[rng.permutation(members)[: round(share * len(members))]] = True
    return val


def load(located: str) -> Split:
    if located == "digits":
        images, labels = digits()
        images = (images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 grey levels
        val = stratified_val(labels, VAL_SHARE, SPLIT_SEED)
        return Split(images[~val], labels[~val], images[val], labels[val], augment=False)
    path = Path(located)
    if path.is_dir():
        parts = [_cifar_batch(path / f"data_batch_{i}") for i in range(1, 6) if (path / f"data_batch_{i}").is_file()]
        x_val, y_val = _cifar_batch(path / "test_batch")
        return Split(
            np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), x_val, y_val, augment=True
        )
    with np.load(path) as archive:
        val = "x_test" if "x_test" in archive.files else "x_val"
        return Split(
            archive["x_train"],
            archive["y_train"].reshape(-1),
            archive[val],
            archive[val.replace("x_", "y_")].reshape(-1),
            augment="mnist" not in path.name,
        )


class _ArraysOnly(pickle.Unpickler):
    """CIFAR's batches are pickles: allow numpy arrays and nothing else (as Keras does)."""

    def find_class(self, module, name):
        if module.split(".")[0] == "numpy" and name in ("_reconstruct", "ndarray", "dtype", "scalar"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as handle:
        batch = {
            k.decode() if isinstance(k, bytes) else k: v
            for k, v in _ArraysOnly(handle, encoding="bytes").load().items()
        }
    x = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return x, np.asarray(batch["labels"], dtype=np.int64)


def fit_to(x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """Images (N, H, W[, C]) shaped for a model input: (H', W', C') images, or a flat vector of
    H'*W' grey pixels (a square that many pixels). Raises ValueError when they cannot be."""
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise ValueError(f"expected images (N, H, W[, C]), got an array of shape {x.shape}")
    if len(input_shape) == 3:
        height, width, channels = input_shape
    elif len(input_shape) == 1 and round(input_shape[0] ** 0.5) ** 2 == input_shape[0]:
        height = width = round(input_shape[0] ** 0.5)
        channels = 1
    else:
        raise ValueError(f"images of shape {x.shape[1:]} do not fit a model input of shape {input_shape}")
    rows = np.arange(height) * x.shape[1] // height  # nearest neighbour
    cols = np.arange(width) * x.shape[2] // width
    x = x[:, rows][:, :, cols]
    if x.shape[-1] != channels:
        if x.shape[-1] == 1:
            x = np.repeat(x, channels, axis=-1)
        elif channels == 1:
            x = x.mean(axis=-1, keepdims=True)
        else:
            raise ValueError(f"images with {x.shape[-1]} channels do not fit an input with {channels}")
    return x.reshape(len(x), *input_shape)


def standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """float32, per-channel zero mean and unit deviation, with the training set's statistics."""
    axes = tuple(range(train.ndim - 1)) if train.ndim > 2 else (0, 1)
    train = train.astype(np.float32)
    mean = train.mean(axis=axes, keepdims=True)[0]
    std = train.std(axis=axes, keepdims=True)[0] + 1e-6
    return [((a.astype(np.float32) - mean) / std).astype(np.float32) for a in (train, *others)]


def augment(x: np.ndarray, rng: np.random.Generator, pad: int = 4) -> np.ndarray:
    """Random horizontal flips and shifts of up to `pad` pixels (He et al. 2016's CIFAR recipe)."""
    if x.ndim != 4:
        return x
    flip = rng.random(len(x)) < 0.5
    out = np.where(flip[:, None, None, None], x[:, :, ::-1], x)
    padded = np.pad(out, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    # Every (H, W) window of each padded image, then one random window per image.
    windows = np.lib.stride_tricks.sliding_window_view(padded, x.shape[1:3], axis=(1, 2))
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, len(x)))
    return np.moveaxis(windows[np.arange(len(x)), dy, dx], 1, -1)  # (N, C, H, W) -> (N, H, W, C)
