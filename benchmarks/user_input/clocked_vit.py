"""A user's small vision Transformer left in debugging settings: jit_compile=False, float32,
batch 32, on in-memory uint8 images (issue 74's script 1):

    python clocked_vit.py          # as left
    python clocked_vit.py hand     # the fix by hand: XLA, mixed_bfloat16, batch 256

EPOCHS (default 1000) sets fit's epochs; SMALL=1 a CPU rehearsal."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

from epoch_clock import Clock

HAND = len(sys.argv) > 1 and sys.argv[1] == "hand"
SMALL = os.environ.get("SMALL") == "1"
if HAND:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
rng = np.random.default_rng(0)
n = 2048 if SMALL else 16384
x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
y = rng.integers(0, 10, size=(n,))
dim, depth = (64, 1) if SMALL else (192, 4)
keras.utils.set_random_seed(0)


def block(h, heads=3):
    a = keras.layers.LayerNormalization()(h)
    a = keras.layers.MultiHeadAttention(heads, dim // heads)(a, a)
    h = h + a
    m = keras.layers.LayerNormalization()(h)
    m = keras.layers.Dense(4 * dim, activation="gelu")(m)
    return h + keras.layers.Dense(dim)(m)


inputs = keras.Input((32, 32, 3), dtype="uint8")
h = keras.layers.Rescaling(1 / 255)(inputs)
h = keras.layers.Conv2D(dim, 4, strides=4)(h)
h = keras.layers.Reshape((64, dim))(h)
for _ in range(depth):
    h = block(h)
h = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h))
model = keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(h))
model.compile(keras.optimizers.AdamW(2e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"], jit_compile=HAND)
model.fit(x, y, batch_size=256 if HAND else 32, epochs=int(os.environ.get("EPOCHS", "1000")), verbose=0,
          callbacks=[Clock(n)])
