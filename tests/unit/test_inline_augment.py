"""child/inline_augment.py: augmentation written in a PyDataset's own `__getitem__` lines, told
as layers from what it returns against what it read, and `__getitem__` rewritten from its source to
hand the images as read (what tune's augment_inline runs, and its patch writes)."""

import ast
import importlib.util
import sys
import textwrap

import numpy as np
import pytest

from gpuscout.child.inline_augment import hand_images_as_read, tell
from gpuscout.core.getitem_rewrite import function_at, rewrite

CIFAR = """
import numpy as np

MEAN = np.array([125.3, 123.0, 113.9], dtype="float32")
STD = np.array([63.0, 62.1, 66.7], dtype="float32")


class Cifar:
    def __init__(self, mode="reflect"):
        rng = np.random.default_rng(0)
        self.x = rng.integers(0, 256, (96, 32, 32, 3), dtype=np.uint8)
        self.y = rng.integers(0, 10, 96)
        self.order, self.batch_size, self.mode = rng.permutation(96), 16, mode
        self.rng = np.random.default_rng(1)

    def __getitem__(self, i):
        idx = self.order[i * self.batch_size : (i + 1) * self.batch_size]
        out = np.empty((len(idx), 32, 32, 3), np.float32)
        for k, j in enumerate(idx):
            img = np.pad(self.x[j], ((4, 4), (4, 4), (0, 0)), mode=self.mode)  # the CIFAR recipe
            top, left = self.rng.integers(0, 9, 2)
            img = img[top : top + 32, left : left + 32]
            if self.rng.random() < 0.5:
                img = img[:, ::-1]
            out[k] = (img - MEAN) / STD
        return out, self.y[idx]


X = np.random.default_rng(2).integers(0, 256, (64, 24, 24, 3), dtype=np.uint8)
Y = np.arange(64)


class Globals:
    bs = 8

    def __getitem__(self, i):
        xs, ys = [], []
        for k in range(self.bs):
            img = X[i * self.bs + k]
            xs.append(img[:, ::-1] if np.random.rand() < 0.5 else img)
            ys.append(Y[i * self.bs + k])
        return np.stack(xs).astype("float32") / 255, np.array(ys)


B = 8
ORDER = np.random.default_rng(3).permutation(64)


class Expression:  # the source indexed by an expression of a global batch size (issue 86, item 7)
    def __getitem__(self, i):
        xs, ys = [], []
        for j in range(B):
            img = X[i * B + j]
            xs.append(img[:, ::-1] if np.random.rand() < 0.5 else img)
            ys.append(Y[i * B + j])
        return np.stack(xs).astype("float32") / 255, np.array(ys)


class Permuted:  # ... through an index array of its own: X[self.order[i * n + j]], n a local
    def __init__(self):
        self.order = ORDER

    def __getitem__(self, i):
        n = len(self.order) // 8
        xs, ys = [], []
        for j in range(n):
            img = X[self.order[i * n + j]]
            xs.append(img[:, ::-1] if np.random.rand() < 0.5 else img)
            ys.append(Y[self.order[i * n + j]])
        return np.stack(xs).astype("float32") / 255, np.array(ys)


class Bright(Cifar):
    def __getitem__(self, i):
        idx = self.order[i * self.batch_size : (i + 1) * self.batch_size]
        return np.stack([self.x[j] * self.rng.uniform(0.8, 1.2) for j in idx]), self.y[idx]


def batches(images, labels, batch=16):
    # a generator as scripts write one: reshuffled each pass, its own random draws per image
    rng = np.random.default_rng(3)
    while True:
        order = np.random.permutation(len(images))
        for start in range(0, len(images) - batch + 1, batch):
            idx = order[start : start + batch]
            xs = []
            for j in idx:
                top, left = rng.integers(0, 9, 2)
                image = images[j, top : top + 24, left : left + 24]
                xs.append(image[::-1] if rng.random() < 0.5 else image)
            yield np.stack(xs) / 127.5 - 1.0, labels[idx]


class TwoReturns(Cifar):
    def __getitem__(self, i):
        idx = self.order[i * self.batch_size : (i + 1) * self.batch_size]
        if i == 0:
            return self.x[idx], self.y[idx]
        return self.x[idx][:, ::-1], self.y[idx]
"""


@pytest.fixture
def module(tmp_path):
    """The classes loaded anew for each test (a rewrite replaces its class's __getitem__)."""
    path = tmp_path / "user_data.py"
    path.write_text(CIFAR)
    spec = importlib.util.spec_from_file_location("user_data", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules["user_data"] = loaded
    spec.loader.exec_module(loaded)
    yield loaded
    del sys.modules["user_data"]


def names(told):
    return [(layer["name"], layer["args"], layer["kwargs"]) for layer in told["layers"]]


def test_the_cifar_loop_is_told_as_layers_and_handed_as_read(module):
    dataset = module.Cifar()
    before_x, before_y = dataset[2]
    told = tell(dataset, type(dataset).__getitem__)
    assert told["images"] == "self.x" and told["indices"] == "idx" and told["explained"] == 48
    assert told["input_shape"] == [32, 32, 3] and told["input_dtype"] == "uint8"
    assert names(told) == [
        ("Normalization", [], {"mean": [125.3, 123.0, 113.9], "variance": [3969.0, 3856.41, 4448.89]}),
        ("RandomFlip", ["horizontal"], {}),
        ("RandomCropEach", [32, 32], {"pad_height": 4, "pad_width": 4, "fill_mode": "reflect"}),
    ]
    # the buffer and the whole loop are left out; the lines that read the indices stay
    lines = CIFAR.splitlines()
    assert [lines[a - 1].strip()[:20] for a, _ in told["removed"]] == [
        "out = np.empty((len(",
        "for k, j in enumerat",
    ]
    # the dataset's arrays are its own again, and it trains as it did: the same samples, the same labels
    assert type(dataset.x) is np.ndarray and before_x.shape == (16, 32, 32, 3)
    assert hand_images_as_read(dataset, told) == "Cifar.__getitem__ returns self.x[idx]"
    x, y = dataset[2]
    assert x.dtype == np.uint8 and np.array_equal(x, dataset.x[dataset.order[32:48]]) and np.array_equal(y, before_y)


def test_images_read_from_a_global_by_a_range_of_the_batch_index(module):
    """No variable holds the indices: X[i * self.bs + k] in the loop, a contiguous range, written as
    the slice of the batch index by the batch size; the labels the loop collects keep their loop."""
    dataset = module.Globals()
    told = tell(dataset, module.Globals.__getitem__)
    assert told["images"] == "X" and told["indices"] == "i * self.bs : (i + 1) * self.bs"
    assert names(told) == [("Rescaling", [1 / 255], {}), ("RandomFlip", ["horizontal"], {})]
    hand_images_as_read(dataset, told)
    x, y = dataset[3]
    assert np.array_equal(x, module.X[24:32]) and np.array_equal(y, np.arange(24, 32))


def test_images_read_by_an_index_expression_are_told_and_handed_as_read(module):
    """Issue 86, item 7: `X[i * B + j]` with B a module global, and `X[self.order[i * n + j]]` with n
    a local: neither left a variable holding the indices read. Both are written as the slice of the
    batch index (of the index array), and the rewritten __getitem__ reads the same samples."""
    dataset = module.Expression()
    told = tell(dataset, module.Expression.__getitem__)
    assert told.get("indices") == "i * B : (i + 1) * B", told
    assert names(told) == [("Rescaling", [1 / 255], {}), ("RandomFlip", ["horizontal"], {})]
    hand_images_as_read(dataset, told)
    x, y = dataset[3]
    assert np.array_equal(x, module.X[24:32]) and np.array_equal(y, np.arange(24, 32))
    permuted = module.Permuted()
    told = tell(permuted, module.Permuted.__getitem__, index=2)
    assert told.get("indices") == "self.order[i * n : (i + 1) * n]", told
    hand_images_as_read(permuted, told)
    x, y = permuted[5]
    assert np.array_equal(x, module.X[module.ORDER[40:48]]) and np.array_equal(y, module.ORDER[40:48])


def test_rewrite_keeps_what_the_return_reads_and_leaves_out_the_rest():
    source = textwrap.dedent("""
        def __getitem__(self, i):
            idx = self.order[i]  # kept: the return reads it
            rng = np.random.default_rng(i)
            buffer = []
            labels = []
            for j in idx:
                image = self.x[j]
                image = image[::-1] if rng.random() < 0.5 else image
                buffer.append(image / 255); labels.append(self.y[j])
            self.seen += 1
            print("batch", i)
            return np.stack(buffer), np.array(labels)
    """)
    lines = source.splitlines(keepends=True)
    function = function_at(ast.parse(source), 2)
    # one line holds a dead statement beside a live one: not edited by halves
    assert rewrite(function, "self.x[idx]", lines) == "line 10 holds more than one statement"
    source = source.replace(
        "buffer.append(image / 255); labels.append(self.y[j])",
        "buffer.append(image / 255)\n        labels.append(self.y[j])",
    )
    lines = source.splitlines(keepends=True)
    found = rewrite(function_at(ast.parse(source), 2), "self.x[idx]", lines)
    text = found.applied(lines[1:], 2)
    assert text == textwrap.dedent("""\
        def __getitem__(self, i):
            idx = self.order[i]  # kept: the return reads it
            labels = []
            for j in idx:
                labels.append(self.y[j])
            self.seen += 1
            print("batch", i)
            return self.x[idx], np.array(labels)
    """)
    ast.parse(text)


def test_what_cannot_be_moved_says_why(module):
    assert "not a flip, crop, shift or rescale" in tell(module.Cifar("edge"), module.Cifar.__getitem__)["why_not"]
    assert "a random brightness" in tell(module.Bright(), module.Bright.__getitem__)["why_not"]
    assert "returns from more than its last line" in tell(module.TwoReturns(), module.TwoReturns.__getitem__)["why_not"]


def test_a_generators_loop_is_told_against_what_it_read_and_its_random_state_left_as_it_was(module):
    """A generator made by fit's caller: its function and arguments read before its first batch, its
    batches made again with its image argument recorded (the global random state restored after),
    told as layers; applied, a generator of the rewritten function with the same arguments."""
    from gpuscout.child.inline_generator import generator_made, hand_generator_as_read, tell_generator

    images = np.random.default_rng(4).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(64) % 10
    made = module.batches(images, labels)
    function, arguments = generator_made(made)
    assert function is module.batches and set(arguments) == {"images", "labels", "batch"}
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    told = tell_generator(function, arguments)
    assert np.array_equal(np.random.get_state()[1], before)  # the script's draws go on as they would have
    assert told["generator"] and told["images"] == "images" and told["indices"] == "idx"
    assert [(t["name"], t["args"]) for t in told["layers"]] == [
        ("Rescaling", [2 / 255]),
        ("RandomFlip", ["vertical"]),
        ("RandomCropEach", [24, 24]),
    ]
    assert told["layers"][0]["kwargs"] == {"offset": -1.0}
    replaced, what = hand_generator_as_read(made, told)
    assert what == "batches yields images[idx]"
    np.random.seed(7)
    order = np.random.permutation(64)
    np.random.seed(7)  # the generator draws its order at its first batch
    x, y = next(replaced)
    assert x.dtype == np.uint8 and np.array_equal(x, images[order[:16]]) and np.array_equal(y, labels[order[:16]])
    started = module.batches(images, labels)
    next(started)
    assert generator_made(started) is None  # a generator already read cannot be made again from its start


def one_pass(images, labels, batch=16):
    for start in range(0, len(images) - batch + 1, batch):
        yield images[start : start + batch] / 255.0, labels[start : start + batch]


def test_a_generator_that_yields_nothing_when_made_again_is_said_in_the_record():
    """Made again from its arguments, a generator whose images were used up by its first run yields
    nothing: told as the reason, not raised as gpuscout's own failure; the random state left as it was."""
    from gpuscout.child.inline_generator import tell_generator

    images = np.random.default_rng(4).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    np.random.seed(3)
    before = np.random.get_state()[1].copy()
    told = tell_generator(one_pass, {"images": images, "labels": np.arange(64), "batch": 128})
    assert told == {"why_not": "made again from the arguments fit's generator was made with, it yielded nothing"}
    assert np.array_equal(np.random.get_state()[1], before)
