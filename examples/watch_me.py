"""A small Keras training as a user might write it: a CNN on the handwritten digits that gpuscout
ships (8x8 images, upscaled to 32x32), fed by a keras.utils.PyDataset that augments each image in a
Python loop as fit asks for a batch. Run it under watch to see what holds it back and what to
change, then tune to measure the change on it:

    gpuscout watch --steps 200 -- python examples/watch_me.py
    gpuscout tune -- python examples/watch_me.py

The CNN is small and strided on purpose: its step is a few milliseconds on a CPU as on a GPU, so
the input's 15-20 ms a batch is what holds it back on either, as it is in many real scripts (a
first version's larger CNN took 25 ms a step on a 2-core CPU and hid the input there). A
PyDataset, not a bare generator: its batches can be made in workers, which tune measures (a
generator's loop makes one batch after another, and tune can only say so).
"""

import keras
import numpy as np

from gpuscout.core.datasets import digits  # the data; any loader of yours does

images, labels = digits()
images = np.kron(images.astype("float32") / 16.0, np.ones((4, 4), "float32"))[..., None]  # 32x32x1


def augment(image, rng):
    """A random shift of up to 3 pixels, a random blur and contrast, and a little noise, one image
    at a time."""
    dy, dx = rng.integers(-3, 4, size=2)
    shifted = np.roll(np.roll(image, dy, axis=0), dx, axis=1)
    weight = rng.uniform(0.0, 0.5)  # blurred: each pixel mixed with the mean of its 3x3 neighbours
    around = sum(np.roll(np.roll(shifted, y, axis=0), x, axis=1) for y in (-1, 0, 1) for x in (-1, 0, 1)) / 9
    mixed = (1 - weight) * shifted + weight * around
    contrast = rng.uniform(0.8, 1.2)
    noisy = (mixed - 0.5) * contrast + 0.5 + rng.normal(0, 0.05, mixed.shape).astype("float32")
    return np.clip(noisy, 0, 1).astype("float32")


class Batches(keras.utils.PyDataset):
    """50 batches an epoch, each of random images, each augmented anew."""

    def __init__(self, batch_size=128, **kwargs):
        super().__init__(**kwargs)
        self.batch_size = batch_size

    def __len__(self):
        return 50

    def __getitem__(self, index):
        rng = np.random.default_rng()
        rows = rng.integers(0, len(images), size=self.batch_size)
        return np.stack([augment(images[i], rng) for i in rows]), labels[rows]


model = keras.Sequential(
    [
        keras.Input((32, 32, 1)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ]
)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(Batches(), epochs=20, verbose=0)
