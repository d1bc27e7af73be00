"""A small Keras training as a user might write it: a CNN on the handwritten digits that gpuscout
ships (8x8 images, upscaled to 32x32), fed by a Python generator that augments each image in a loop
as fit asks for it. Run it under watch to see what holds it back and what to change:

    gpuscout watch --steps 200 -- python examples/watch_me.py

The CNN is small and strided on purpose: its step is a few milliseconds on a CPU as on a GPU, so
the generator's 15-20 ms a batch is what holds it back on either, as it is in many real scripts
(a first version's larger CNN took 25 ms a step on a 2-core CPU and hid the generator there).
"""

import keras
import numpy as np

from gpuscout.core.datasets import digits  # the data; any loader of yours does

images, labels = digits()
images = np.kron(images.astype("float32") / 16.0, np.ones((4, 4), "float32"))[..., None]  # 32x32x1
rng = np.random.default_rng(0)


def augment(image):
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


def batches(batch_size=128):
    while True:
        rows = rng.integers(0, len(images), size=batch_size)
        yield np.stack([augment(images[i]) for i in rows]), labels[rows]


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
model.fit(batches(), steps_per_epoch=50, epochs=20, verbose=0)
