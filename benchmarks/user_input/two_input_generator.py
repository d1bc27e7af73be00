"""A user-style two-input model with its own train_step, fed float32 by a plain Python generator
(issue 60, case 1's second script): images and a row of tabular features, normalised on the host
in float32 batch by batch, in fit's own thread.

    python two_input_generator.py          # as a user left it: float32, the generator read in turn
    python two_input_generator.py hand     # the fix by hand: the generator read ahead in a thread
                                           # (8 batches) and mixed_bfloat16
    python two_input_generator.py read_ahead | bf16   # each half of the fix by hand alone
    python two_input_generator.py time     # the generator alone: ms per batch, then exit

SMALL=1 makes it small enough for a CPU rehearsal.
"""
import os
import queue
import sys
import threading

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax
import keras
import numpy as np

ARG = sys.argv[1] if len(sys.argv) > 1 else ""
READ_AHEAD, BF16 = ARG in ("hand", "read_ahead"), ARG in ("hand", "bf16")
SMALL = os.environ.get("SMALL") == "1"
B, SIDE, FEATURES = (32, 24, 16) if SMALL else (128, 96, 32)
N = 512 if SMALL else 4096
WIDTH = 16 if SMALL else 96
if BF16:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")

rng = np.random.default_rng(0)
IMAGES = rng.integers(0, 256, size=(N, SIDE, SIDE, 3), dtype=np.uint8)
TABLE = rng.normal(size=(N, FEATURES)).astype("float32")
LABELS = rng.integers(0, 10, size=N)
MEAN, STD = np.float32([123.7, 116.3, 103.5]), np.float32([58.4, 57.1, 57.4])


def batches():
    """Random rows, normalised on the host: the user's float32 input, made as fit asks for it."""
    while True:
        rows = rng.integers(0, N, size=B)
        images = (IMAGES[rows].astype("float32") - MEAN) / STD
        yield (images, TABLE[rows] * 0.5), LABELS[rows]


def read_ahead(source, depth=8):
    """The fix by hand: a thread keeps `depth` batches ready."""
    ready = queue.Queue(depth)
    threading.Thread(target=lambda: [ready.put(item) for item in source], daemon=True).start()
    while True:
        yield ready.get()


class TwoInputs(keras.Model):
    """The user's own train_step (Keras 3 on jax: stateless, as Keras' guide writes it)."""

    def compute_loss_and_updates(self, trainable, non_trainable, x, y):
        logits, non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
        loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            y, keras.ops.cast(logits, "float32"), from_logits=True))
        return loss, non_trainable

    def train_step(self, state, data):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y = data
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        return {"loss": loss}, (trainable, non_trainable, optimizer_variables, metrics_variables)


image_in = keras.Input((SIDE, SIDE, 3))
table_in = keras.Input((FEATURES,))
x = image_in
for filters in (WIDTH, 2 * WIDTH, 4 * WIDTH):
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
x = keras.layers.GlobalAveragePooling2D()(x)
t = keras.layers.Dense(128, activation="relu")(table_in)
joined = keras.layers.Concatenate()([x, t])
model = TwoInputs([image_in, table_in], keras.layers.Dense(10)(keras.layers.Dense(256, activation="relu")(joined)))
model.compile(keras.optimizers.Adam(1e-3))
if ARG == "time":
    import time

    made = batches()
    next(made)
    start = time.perf_counter()
    for _ in range(50):
        next(made)
    print(f"the generator alone: {(time.perf_counter() - start) / 50 * 1e3:.1f} ms a batch")
    sys.exit(0)
model.fit(read_ahead(batches()) if READ_AHEAD else batches(), steps_per_epoch=100, epochs=1000, verbose=0)
