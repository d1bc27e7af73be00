"""child/tf_data.py with real TensorFlow, in this process: the script's own calls that built a
pipeline, each map's elements checked to repeat (a random map and a shuffle before it tell), and
tune's tf.data changes made where the script wrote the calls."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gpuscout.child import tf_data, tune_state  # noqa: E402
from gpuscout.core.tune_settings import TuneSettings  # noqa: E402


@pytest.fixture
def wrapped():
    from tensorflow.python.data.ops import dataset_ops

    tf_data.install(dataset_ops)
    yield
    for name in tf_data.BUILDERS:
        method = dataset_ops.DatasetV2.__dict__.get(name)
        if getattr(method, "_gpuscout_wrapped", False):
            setattr(dataset_ops.DatasetV2, name, method.__wrapped__)
    tune_state.SETTINGS = TuneSettings()


def ops(dataset, check=True):
    return [(o["op"], o.get("parallel"), o.get("repeats"), o.get("elements")) for o in tf_data.chain_of(dataset, check)]


def test_the_chain_and_which_maps_repeat(wrapped):
    source = tf.data.Dataset.from_tensor_slices(np.arange(64.0, dtype="float32"))
    steady = source.map(lambda v: v * 2).batch(8).prefetch(2)
    assert ops(steady) == [("map", False, True, 64), ("batch", False, None, None), ("prefetch", None, None, None)]
    chain = tf_data.chain_of(steady)
    assert chain[0]["file"] == __file__ and chain[0]["line"] > 0  # where this file called map
    noisy = source.map(lambda v: v + tf.random.uniform(()), num_parallel_calls=2)
    assert ops(noisy) == [("map", True, False, 64)]  # two passes differ: random
    shuffled = source.shuffle(64).map(lambda v: v * 2)
    assert ops(shuffled)[1][2] is False  # a new order each pass
    endless = source.repeat().map(lambda v: v)
    [(_, _, _, elements)] = [o for o in ops(endless) if o[0] == "map"]
    assert elements is None and tf_data.chain_of(endless, True)[1]["endless"]
    # Keras' own maps (its data adapters) are not the script's: a dataset made elsewhere has no chain
    assert tf_data.chain_of(tf.data.Dataset.range(3)) is None


def test_tune_s_changes_are_made_where_the_script_built_the_pipeline(wrapped):
    tune_state.SETTINGS = TuneSettings(parallel_calls=True)
    source = tf.data.Dataset.from_tensor_slices(np.arange(16.0, dtype="float32"))
    made = source.map(lambda v: v * 2)
    line = tf_data.chain_of(made)[0]["line"]
    assert ops(made, check=False) == [("map", True, None, None)]  # num_parallel_calls=AUTOTUNE given
    tune_state.SETTINGS = TuneSettings(parallel_calls=True, cache_at=f"{__file__}:{line + 5}")
    source.map(lambda v: v)  # not the line asked: no cache
    cached = source.map(lambda v: v * 3)  # this one is
    assert [o[0] for o in ops(cached, check=False)] == ["map", "cache"]
    assert list(cached.as_numpy_iterator())[:3] == [0.0, 3.0, 6.0]


IMAGES = np.random.default_rng(0).integers(0, 256, size=(8, 16, 16, 3), dtype=np.uint8)
LABELS = np.arange(8)


def cifar_recipe(image, label):
    """The TensorFlow guides' augmentation: mirrored 2 px, cropped back, flipped, scaled to [0, 1]."""
    image = tf.pad(image, [[2, 2], [2, 2], [0, 0]], mode="REFLECT")
    image = tf.image.random_crop(image, [16, 16, 3])
    image = tf.image.random_flip_left_right(image)
    return tf.cast(image, tf.float32) / 255.0, label


def told(made):
    [op] = [o for o in tf_data.chain_of(made, True, tell_augmentation=True) if o["op"] == "map"]
    return op.get("augment")


def test_a_random_maps_augmentation_is_told_as_layers_and_its_labels_checked(wrapped):
    """Issue 77: a random map called again on one element of its input, its image told against the
    one it was given; the label must come back as given. A deterministic map is not told (nothing to
    move: a cache keeps it), a relabelling one or a random brightness is refused, with why."""
    source = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
    facts = told(source.map(cifar_recipe).batch(4))
    assert (
        facts["function"] == "cifar_recipe" and facts["input_shape"] == [16, 16, 3] and facts["input_dtype"] == "uint8"
    )
    assert [(layer["name"], layer["args"], layer["kwargs"]) for layer in facts["layers"]] == [
        ("Rescaling", [1 / 255], {}),
        ("RandomFlip", ["horizontal"], {}),
        ("RandomCropEach", [16, 16], {"pad_height": 2, "pad_width": 2, "fill_mode": "reflect"}),
    ]
    assert facts["explained"] == 48 and "why_not" not in facts
    assert told(source.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))) is None  # repeats: not told
    # 32 images: a flip is one coin an image, and 8 came out the same in both passes one time in 256
    many = tf.data.Dataset.from_tensor_slices((np.concatenate([IMAGES] * 4), np.concatenate([LABELS] * 4)))
    relabelled = told(many.map(lambda x, y: (tf.image.random_flip_left_right(x), y + 1)))
    assert relabelled["why_not"] == "it changes the element's part 2 (a label or weight), not the image alone"
    bright = told(source.map(lambda x, y: (tf.image.random_brightness(tf.cast(x, tf.float32), 20.0), y)))
    assert bright["why_not"] == "its values change from call to call (a random brightness or contrast)"


def test_augment_map_leaves_the_map_out_where_the_script_wrote_it(wrapped):
    """Under tune's augment_map the map at its FILE:LINE is left out (the pipeline hands the images as
    stored); another map on another line is built as written."""
    source = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
    line = tf_data.chain_of(source.map(cifar_recipe))[0]["line"]
    tune_state.SETTINGS = TuneSettings(augment_map={"at": f"{__file__}:{line + 3}", "layers": [], "input_shape": []})
    kept = source.map(cifar_recipe)  # not the line asked: built as written
    left = source.map(cifar_recipe).batch(4)  # this one is left out
    assert [o["op"] for o in tf_data.chain_of(kept)] == ["map"]
    assert [o["op"] for o in tf_data.chain_of(left)] == ["batch"] and f"{__file__}:{line + 3}" in tf_data.SKIPPED
    first = next(left.as_numpy_iterator())
    assert first[0].dtype == np.uint8 and (first[0] == IMAGES[:4]).all() and (first[1] == LABELS[:4]).all()
    tf_data.SKIPPED.clear()
