"""A user's tabular MLP at batch 64 on in-memory arrays, validated on held-out arrays (issue 74's
script 4):

    python clocked_mlp.py          # as left: batch 64
    python clocked_mlp.py hand     # the fix by hand: batch 1,024, Adam's rate x4

EPOCHS (default 1000) sets fit's epochs; SMALL=1 a CPU rehearsal."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

from epoch_clock import Clock

HAND = len(sys.argv) > 1 and sys.argv[1] == "hand"
SMALL = os.environ.get("SMALL") == "1"
N, FEATURES = (8192, 32) if SMALL else (262_144, 64)
BATCH = 1024 if HAND else 64
rng = np.random.default_rng(0)
x = rng.normal(size=(N, FEATURES)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")
x_val, y_val = x[: N // 8] + 0.1, y[: N // 8]
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
model.compile(keras.optimizers.Adam(4e-3 if HAND else 1e-3),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(x, y, batch_size=BATCH, validation_data=(x_val, y_val), epochs=int(os.environ.get("EPOCHS", "1000")),
          verbose=0, callbacks=[Clock(N)])
