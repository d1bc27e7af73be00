"""A user's text classifier fed by a generator that tokenises every batch in Python, every epoch,
40 steps an epoch (issue 74's script 5: steps_per_execution 32 trained 64 of them):

    python clocked_text.py          # as left
    python clocked_text.py hand     # the fix by hand: tokenised once, fed from memory

EPOCHS (default 1000) sets fit's epochs; SMALL=1 a CPU rehearsal."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

from epoch_clock import Clock

HAND = len(sys.argv) > 1 and sys.argv[1] == "hand"
SMALL = os.environ.get("SMALL") == "1"
B, STEPS, SEQ, VOCAB = (32, 40, 32, 2000) if SMALL else (128, 40, 128, 20_000)
rng = np.random.default_rng(0)
WORDS = [f"w{i}" for i in range(5000)]
TEXTS = [" ".join(rng.choice(WORDS, size=SEQ)) for _ in range(B * STEPS)]
LABELS = rng.integers(0, 2, size=B * STEPS)
keras.utils.set_random_seed(0)


def tokenise(text):
    ids = [sum(map(ord, word)) % VOCAB for word in text.lower().split()]
    return (ids + [0] * SEQ)[:SEQ]


def batch(i):
    rows = [tokenise(t) for t in TEXTS[i * B:(i + 1) * B]]
    return np.asarray(rows, dtype="int32"), LABELS[i * B:(i + 1) * B]


def batches():
    while True:
        for i in range(STEPS):
            yield batch(i)


def kept():
    made = [batch(i) for i in range(STEPS)]
    while True:
        yield from made


inputs = keras.Input((SEQ,), dtype="int32")
x = keras.layers.Embedding(VOCAB, 64 if SMALL else 256)(inputs)
for _ in range(2):
    x = keras.layers.Conv1D(64 if SMALL else 512, 5, padding="same", activation="relu")(x)
x = keras.layers.GlobalAveragePooling1D()(x)
model = keras.Model(inputs, keras.layers.Dense(2)(x))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(kept() if HAND else batches(), steps_per_epoch=STEPS, epochs=int(os.environ.get("EPOCHS", "1000")),
          verbose=0, callbacks=[Clock(B * STEPS)])
