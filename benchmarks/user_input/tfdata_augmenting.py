"""A user's script (it knows nothing of gpuscout): a small CNN on CIFAR-sized uint8 images fed by a
tf.data pipeline written as the TensorFlow guides write it: shuffled, then a map that mirrors 4
pixels at each image's edges, crops it back to 32 x 32 at random, flips half and normalises it per
channel, element by element, then batched and prefetched (issue 77, the tf.data form). It prints its
own clock: images/s of each epoch, as its callback measures it.

    python tfdata_augmenting.py            # as left
    python tfdata_augmenting.py by-hand    # the fix by hand: the map left out, the pipeline hands the
                                           # uint8 images; the model normalises, flips and crops them
"""
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

BY_HAND = len(sys.argv) > 1 and sys.argv[1] == "by-hand"
SIDE, BATCH, STEPS = 32, 128, 20
keras.utils.set_random_seed(0)
IMAGES = np.random.default_rng(0).integers(0, 256, (BATCH * STEPS, SIDE, SIDE, 3), dtype=np.uint8)
LABELS = np.random.default_rng(1).integers(0, 10, BATCH * STEPS)
MEAN = np.array([125.3, 123.0, 113.9], dtype="float32")
STD = np.array([63.0, 62.1, 66.7], dtype="float32")


def augment(image, label):
    image = tf.pad(image, [[4, 4], [4, 4], [0, 0]], mode="REFLECT")
    image = tf.image.random_crop(image, [SIDE, SIDE, 3])
    image = tf.image.random_flip_left_right(image)
    return (tf.cast(image, tf.float32) - MEAN) / STD, label


class RandomCropEach(keras.layers.Layer):
    """By hand: a crop of a reflected border at a random place in each image, as tf.image does."""

    def __init__(self, pad, **kwargs):
        super().__init__(**kwargs)
        self.pad = pad
        self.seed = keras.random.SeedGenerator(0)

    def call(self, images, training=True):
        if not training:
            return images
        padded = keras.ops.pad(images, [[0, 0], [self.pad] * 2, [self.pad] * 2, [0, 0]], mode="reflect")
        n = keras.ops.shape(images)[0]
        tops = keras.random.randint((n, 1), 0, 2 * self.pad + 1, seed=self.seed)
        lefts = keras.random.randint((n, 1), 0, 2 * self.pad + 1, seed=self.seed)
        rows = keras.ops.expand_dims(keras.ops.expand_dims(tops + keras.ops.arange(SIDE), -1), -1)
        cut = keras.ops.take_along_axis(padded, keras.ops.broadcast_to(rows, (n, SIDE, SIDE + 2 * self.pad, 3)), 1)
        cols = keras.ops.expand_dims(keras.ops.expand_dims(lefts + keras.ops.arange(SIDE), 1), -1)
        return keras.ops.take_along_axis(cut, keras.ops.broadcast_to(cols, (n, SIDE, SIDE, 3)), 2)


class Clock(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1}: {BATCH * STEPS / (time.perf_counter() - self.start):.0f} images/s", flush=True)


data = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS)).shuffle(len(IMAGES))
if not BY_HAND:
    data = data.map(augment)
data = data.batch(BATCH).prefetch(tf.data.AUTOTUNE)

inputs = keras.Input((SIDE, SIDE, 3))
h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
h = keras.layers.Conv2D(16, 3, activation="relu")(h)
h = keras.layers.GlobalAveragePooling2D()(h)
model = keras.Model(inputs, keras.layers.Dense(10)(h))
if BY_HAND:
    model = keras.Sequential(
        [
            keras.Input((SIDE, SIDE, 3)),
            keras.layers.Normalization(mean=MEAN, variance=STD**2),
            keras.layers.RandomFlip("horizontal"),
            RandomCropEach(4),
            model,
        ]
    )
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(data, epochs=1000, verbose=0, callbacks=[Clock()])
