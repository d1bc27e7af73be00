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
