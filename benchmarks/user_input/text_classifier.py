"""A user-style text classifier whose input is tokenised in Python every epoch (issue 45's case):

    python text_classifier.py threads     # a PyDataset, 6 worker threads, tokenising per batch
    python text_classifier.py processes   # the same with 6 worker processes
    python text_classifier.py generator   # the same tokenisation from a plain generator, every epoch
    python text_classifier.py hand        # the fix by hand: tokenised once, fed from memory

Every epoch yields the same batches (no augmentation), so tokenising once is the fix that matters.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np
import keras

MODE = sys.argv[1]
B, STEPS, SEQ, VOCAB = 128, 40, 128, 20_000
rng = np.random.default_rng(0)
WORDS = [f"w{i}" for i in range(5000)]
TEXTS = [" ".join(rng.choice(WORDS, size=SEQ)) for _ in range(B * STEPS)]
LABELS = rng.integers(0, 2, size=B * STEPS)


def tokenise(text):
    ids = [hash(word) % VOCAB for word in text.lower().split()]  # PYTHONHASHSEED fixes str hashes per run
    return (ids + [0] * SEQ)[:SEQ]


def batch(i):
    rows = [tokenise(t) for t in TEXTS[i * B:(i + 1) * B]]
    return np.asarray(rows, dtype="int32"), LABELS[i * B:(i + 1) * B]


class Texts(keras.utils.PyDataset):
    def __init__(self):
        super().__init__(workers=6, use_multiprocessing=MODE == "processes")

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        return batch(i)


def batches():
    while True:
        for i in range(STEPS):
            yield batch(i)


def kept():
    made = [batch(i) for i in range(STEPS)]
    while True:
        yield from made


inputs = keras.Input((SEQ,), dtype="int32")
x = keras.layers.Embedding(VOCAB, 256)(inputs)
for _ in range(2):
    x = keras.layers.Conv1D(512, 5, padding="same", activation="relu")(x)
x = keras.layers.GlobalAveragePooling1D()(x)
model = keras.Model(inputs, keras.layers.Dense(2)(x))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
if MODE in ("threads", "processes"):
    model.fit(Texts(), epochs=1000, verbose=0)
elif MODE == "generator":
    model.fit(batches(), steps_per_epoch=STEPS, epochs=1000, verbose=0)
else:
    model.fit(kept(), steps_per_epoch=STEPS, epochs=1000, verbose=0)
