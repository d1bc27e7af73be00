"""child/sample_work.py: a few calls of a dataset's __getitem__ profiled (its lines, the script's
function it calls per sample, that function's arguments), the function told as layers, and, in a
run that moves it, replaced by one that returns its image as given, found by where it is defined."""

import sys
import threading
import time

import numpy as np

from gpuscout.child import sample_work
from gpuscout.child.sample_work import PROFILED_CALLS, SampleWork, move_into_model

IMAGES = np.random.default_rng(0).integers(0, 256, (8, 16, 16, 3), dtype=np.uint8)


def flip(image, rng):
    time.sleep(0.002)  # the work that takes the time
    return (image[:, ::-1] if rng.random() < 0.5 else image).astype("float32") / 255


class Flipping:
    def __init__(self):
        self.rng = np.random.default_rng(1)

    def augment(self, image):
        return flip(image, self.rng)

    def __getitem__(self, i):
        return np.stack([self.augment(image) for image in IMAGES])


class Inline:
    def __getitem__(self, i):
        out = IMAGES.astype("float32")
        time.sleep(0.01)
        return out / 255


def test_the_method_called_per_sample_is_found_timed_and_told_as_layers():
    dataset = Flipping()
    work = SampleWork(dataset)
    assert work.install() is None
    try:
        for i in range(PROFILED_CALLS + 3):
            dataset[i]
    finally:
        work.uninstall()
    assert Flipping.__getitem__ is work.original and sys.gettrace() is None
    facts = work.facts()
    assert facts["profiled"] == PROFILED_CALLS  # the first call is left out, and the later ones untraced
    assert facts["getitem_s"] >= 8 * 0.002
    function = facts["function"]
    getitem_line = Flipping.__getitem__.__code__.co_firstlineno + 1
    assert function["name"] == "Flipping.augment" and function["owner"] == "Flipping.augment"
    assert function["call_line"] == getitem_line and function["calls_per_batch"] == 8
    assert function["share"] > 0.8 and function["argument"] == "image" and function["input_shape"] == [16, 16, 3]
    assert [layer["name"] for layer in function["layers"]] == ["Rescaling", "RandomFlip"]
    assert facts["lines"][0]["line"] == getitem_line
    # a run that moves it: the method returns its image as given, found by its file and line
    moved = move_into_model(dataset, {"file": function["file"], "line": function["line"], "argument": "image"})
    try:
        assert moved == "Flipping.augment"
        assert dataset[0].dtype == np.uint8 and (dataset[0] == IMAGES).all()
    finally:
        Flipping.augment = FLIPPING_AUGMENT


FLIPPING_AUGMENT = Flipping.augment


def test_work_in_getitem_itself_is_named_by_its_lines_and_threads_are_traced_one_at_a_time():
    dataset = Inline()
    work = SampleWork(dataset)
    assert work.install() is None
    threads = [threading.Thread(target=lambda: [dataset[i] for i in range(4)]) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    work.uninstall()
    facts = work.facts()
    assert facts["profiled"] == PROFILED_CALLS and "function" not in facts
    sleep_line = Inline.__getitem__.__code__.co_firstlineno + 2
    assert facts["lines"][0]["line"] == sleep_line and facts["lines"][0]["share"] > 0.5


def test_a_function_of_the_module_is_replaced_where_getitem_finds_it(monkeypatch):
    class ByFunction:
        def __getitem__(self, i):
            return np.stack([flip(image, RNG) for image in IMAGES])

    monkeypatch.setitem(globals(), "flip", flip)  # put back after the test
    code = flip.__code__
    where = move_into_model(ByFunction(), {"file": code.co_filename, "line": code.co_firstlineno, "argument": "image"})
    assert where == "flip" and (ByFunction()[0] == IMAGES).all()
    # a dataset whose __getitem__ is not the script's own is not profiled
    assert "not the script's own" in SampleWork(np.zeros(3)).install()
    assert sample_work.is_scripts(__file__) and not sample_work.is_scripts(np.__file__)


RNG = np.random.default_rng(3)


def flip_each(images):
    time.sleep(0.004)
    flips = RNG.random(len(images)) < 0.5
    return np.where(flips[:, None, None, None], images[:, :, ::-1], images).astype("float32") / 255


class BatchWise:
    def __getitem__(self, i):
        return flip_each(IMAGES)


def test_a_function_of_the_whole_batch_is_found_and_its_image_shape_is_one_images():
    RNG.bit_generator.state = np.random.default_rng(7).bit_generator.state  # the same draws in any order
    dataset = BatchWise()
    work = SampleWork(dataset)
    assert work.install() is None
    for i in range(PROFILED_CALLS + 1):
        dataset[i]
    work.uninstall()
    function = work.facts()["function"]
    assert function["name"] == "flip_each" and function["calls_per_batch"] == 1 and function["argument"] == "images"
    assert function["input_shape"] == [16, 16, 3] and [layer["name"] for layer in function["layers"]] == [
        "Rescaling",
        "RandomFlip",
    ]
