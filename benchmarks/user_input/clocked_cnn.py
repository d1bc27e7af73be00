"""A user's small image classifier on in-memory arrays with what a real training's epochs hold
beyond their steps (issue 75): validation on held-out arrays each epoch and a checkpoint-like
callback at each epoch's end, its own epoch clock printed (user_input/epoch_clock.py).

    python clocked_cnn.py                    # the main branch's build
    STEP_SLEEP_MS=1.5 python clocked_cnn.py  # a slower build: 1.5 ms of host work after each step

EPOCHS (default 8) sets fit's epochs; SMALL=1 a CPU's size."""

import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

from epoch_clock import Clock

SMALL = os.environ.get("SMALL") == "1"
N, SIDE, BATCH = (2048, 16, 64) if SMALL else (16_384, 32, 128)
rng = np.random.default_rng(0)
x = rng.random((N, SIDE, SIDE, 3), dtype=np.float32)
y = rng.integers(0, 10, N)
x_val, y_val = x[: N // 4], y[: N // 4]
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input((SIDE, SIDE, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ]
)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Checkpoint(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.03)  # the model written to disk


class HostWork(keras.callbacks.Callback):
    """What a slower build adds after each step (a metric computed in numpy, a log line)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


extra = float(os.environ.get("STEP_SLEEP_MS", "0")) / 1000
model.fit(
    x,
    y,
    batch_size=BATCH,
    validation_data=(x_val, y_val),
    epochs=int(os.environ.get("EPOCHS", "8")),
    verbose=0,
    callbacks=[Checkpoint(), Clock(N), *([HostWork(extra)] if extra else [])],
)
