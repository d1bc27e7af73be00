"""A user's script (it knows nothing of gpuscout): a small CNN fed by a tf.data pipeline whose
per-element map runs deterministic pure-Python work (a decode, through tf.numpy_function), left
sequential, without a cache or a prefetch; TensorFlow backend, on the CPU (issue 77). It prints
its own samples/s per epoch.

    python tfdata_python_map.py            # as left
    python tfdata_python_map.py by-hand    # the fix by hand: .cache() after the map, .prefetch(AUTOTUNE)
"""
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np
import tensorflow as tf
import keras

BY_HAND = len(sys.argv) > 1 and sys.argv[1] == "by-hand"
X = np.random.default_rng(0).integers(0, 256, (2048, 16, 16, 3), dtype=np.uint8)
Y = np.random.default_rng(1).integers(0, 10, 2048)


def decode(image):
    s = 0
    for k in range(3000):  # a pure-Python decode of each element
        s += k
    return (image.astype("float32") / 255.0)


def parse(image, label):
    out = tf.numpy_function(decode, [image], tf.float32)
    out.set_shape((16, 16, 3))
    return out, label


ds = tf.data.Dataset.from_tensor_slices((X, Y)).map(parse)
if BY_HAND:
    ds = ds.cache()
ds = ds.shuffle(2048, seed=0).batch(64)
if BY_HAND:
    ds = ds.prefetch(tf.data.AUTOTUNE)


class Clock(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1}: {2048 / (time.perf_counter() - self.start):.1f} samples/s", flush=True)


inputs = keras.Input((16, 16, 3))
h = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
h = keras.layers.GlobalAveragePooling2D()(h)
model = keras.Model(inputs, keras.layers.Dense(10)(h))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1000, verbose=0, callbacks=[Clock()])
