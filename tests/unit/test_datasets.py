import pickle

import numpy as np
import pytest

from gpuscout.core import datasets
from gpuscout.core.errors import UsageError
from tests.data_files import write_cifar_dir


def test_cifar_is_found_in_keras_cache_and_loaded_channels_last(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    cache = write_cifar_dir(tmp_path / "datasets" / "cifar-10-batches-py-target" / "cifar-10-batches-py")
    located = datasets.locate("cifar10")
    assert located == str(cache)
    split = datasets.load(located)
    assert split.x_train.shape == (100, 32, 32, 3) and split.x_val.shape == (20, 32, 32, 3)
    raw = pickle.loads((cache / "data_batch_1").read_bytes())[b"data"][0]
    assert split.x_train[0, 0, 0].tolist() == [raw[0], raw[1024], raw[2048]]  # R, G, B planes


def test_a_missing_cache_says_how_to_fill_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    with pytest.raises(UsageError, match=r"CIFAR-10 is not in Keras' cache .*keras.datasets.cifar10.load_data\(\)"):
        datasets.locate("cifar10")


def test_a_pickle_with_anything_but_arrays_is_refused(tmp_path):
    cache = write_cifar_dir(tmp_path / "c")
    (cache / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [print]}))
    with pytest.raises(pickle.UnpicklingError, match="unexpected object"):
        datasets.load(str(cache))


def test_npz_files_need_train_and_validation_arrays(tmp_path):
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, x_train=np.zeros((4, 8, 8)), y_train=np.zeros(4), x_val=np.zeros((2, 8, 8)), y_val=np.zeros(2))
    np.savez(bad, x_train=np.zeros((4, 8, 8)), y_train=np.zeros(4))
    assert datasets.load(datasets.locate(str(good))).x_val.shape == (2, 8, 8)
    with pytest.raises(UsageError, match="must hold x_train, y_train and x_test"):
        datasets.locate(str(bad))
    with pytest.raises(UsageError, match="unknown --dataset"):
        datasets.locate(str(tmp_path / "nothing.npz"))


def test_images_are_fitted_to_the_input_by_nearest_neighbour():
    x = np.arange(2 * 2 * 2).reshape(2, 2, 2).astype(np.uint8)  # two 2x2 grey images
    colour = datasets.fit_to(x, (4, 4, 3))
    assert colour.shape == (2, 4, 4, 3) and (colour[0, :2, :2] == x[0, 0, 0]).all()
    assert (colour[..., 0] == colour[..., 2]).all()
    flat = datasets.fit_to(x, (16,))  # a vector input of a square number of pixels
    assert flat.shape == (2, 16)
    with pytest.raises(ValueError, match="do not fit"):
        datasets.fit_to(x, (10,))


def test_digits_split_is_fixed_and_stratified():
    # the shipped digits are scikit-learn's: 1,797 images of 0..16, its per-class counts
    images, labels = datasets.digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8 and images.max() == 16
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    a, b = datasets.load("digits"), datasets.load("digits")
    assert len(a.x_train) + len(a.x_val) == 1797 and (a.y_val == b.y_val).all() and (a.x_val == b.x_val).all()
    # a fifth of each class, rounded: 178 -> 36 (35.6), 174 -> 35 (34.8), 183 -> 37 (36.6)
    assert np.bincount(a.y_val).tolist() == [36, 36, 35, 37, 36, 36, 36, 36, 35, 36]
    assert a.x_train.max() == 255  # 16 grey levels scaled to 0..255


def test_standardise_uses_the_training_statistics():
    train = np.random.default_rng(0).integers(0, 256, (50, 4, 4, 3)).astype(np.uint8)
    out_train, out_val = datasets.standardise(train, train[:5])
    assert np.allclose(out_train.mean(axis=(0, 1, 2)), 0, atol=1e-4)
    assert np.allclose(out_train.std(axis=(0, 1, 2)), 1, atol=1e-3)
    assert np.allclose(out_val, out_train[:5])


def test_augmentation_flips_and_shifts_each_image_on_its_own():
    x = np.random.default_rng(0).random((64, 8, 8, 1)).astype(np.float32)
    out = datasets.augment(x, np.random.default_rng(1), pad=2)
    assert out.shape == x.shape
    unchanged = [np.array_equal(out[i], x[i]) for i in range(64)]
    assert 0 < sum(unchanged) < 16  # about 1 in 50 (no flip, no shift) stays as it was
