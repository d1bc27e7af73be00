"""Whether a script's batches repeat (child/input_repeats.py), fed by hand the way fit reads them."""

import numpy as np

from gpuscout.child.input_repeats import FULL_DIGEST_BYTES, InputRepeats, batch_digest

rng = np.random.default_rng(0)
DATA = [(rng.normal(size=(8, 4)).astype("float32"), np.arange(8) + i) for i in range(10)]


def keras_epochs(epochs: int, carried: int = 3):
    """Batch indices as Keras 3 hands a PyDataset of 10 batches with several workers over: each
    epoch a new shuffled order, and `carried` batches made for the previous epoch read first (an
    epoch then holds some batches twice and misses others, which is why the check is by count)."""
    order = []
    left = []
    for _ in range(epochs):
        new = list(rng.permutation(10))
        order += left + new[: 10 - len(left)]
        left = new[10 - len(left) :][:carried] or new[:carried]
    return order


def test_a_deterministic_pydataset_repeats_whatever_order_keras_reads_it_in():
    seen = InputRepeats(batches_per_epoch=10)
    for index in keras_epochs(5):
        seen.note(DATA[index])
    counts = seen.counts()
    assert counts["checked"] == 40 and counts["same"] == 40 and counts["batches"] == 10
    assert counts["bytes"] == sum(x.nbytes + y.nbytes for x, y in DATA)


def test_random_augmentation_is_new_every_time():
    seen = InputRepeats(batches_per_epoch=10)
    for index in keras_epochs(3):
        x, y = DATA[index]
        seen.note((x + rng.normal(size=x.shape).astype("float32") * 0.01, y))
    counts = seen.counts()
    assert counts["checked"] == 20 and counts["same"] == 0


def test_a_generator_repeats_with_its_period_and_a_reordered_one_does_not():
    periodic = InputRepeats(batches_per_epoch=None)
    for i in range(35):
        periodic.note(DATA[i % 7])
    assert periodic.counts() | {"hash_s": 0} == {
        "checked": 28,
        "same": 28,
        "period": 7,
        "order": "stream",
        "bytes": sum(x.nbytes + y.nbytes for x, y in DATA[:7]),
        "hash_s": 0,
    }
    shuffled = InputRepeats(batches_per_epoch=None)
    for epoch in range(3):
        for i in range(7) if epoch == 0 else rng.permutation(7):
            shuffled.note(DATA[i])
    counts = shuffled.counts()
    assert counts["checked"] > 0 and counts["same"] < counts["checked"]


def test_device_tensors_are_not_hashed():
    class DeviceArray:  # stands in for a jax or torch array: not host memory
        __module__ = "jaxlib.xla_extension"

    seen = InputRepeats(batches_per_epoch=10)
    seen.note((DeviceArray(), np.zeros(3)))
    assert seen.counts()["stopped"] == "the batches are jaxlib tensors, not host arrays"


def test_digests_see_one_byte_and_bound_their_cost():
    a = np.zeros(FULL_DIGEST_BYTES // 4, dtype="float32")
    b = a.copy()
    b[12345] = 1.0
    assert batch_digest(a)[0] != batch_digest(b)[0]  # hashed whole up to FULL_DIGEST_BYTES
    assert batch_digest((a, "x"))[0] != batch_digest((a, "y"))[0]
    strings = np.array(["the cat", "a dog"], dtype=object)  # objects: their values, not their pointers
    assert batch_digest(strings)[0] == batch_digest(np.array(["the cat", "a dog"], dtype=object))[0]
