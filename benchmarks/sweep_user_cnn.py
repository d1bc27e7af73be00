"""A user-style image script for benchmarks/sweep_early_stop.py: `python sweep_user_cnn.py LR
[EPOCHS] [--small]` trains a small CNN with SGD on synthetic 32x32 images of 10 classes (each a fixed
random template plus noise: learnable, no download), fit's logs holding val_accuracy. A learning
rate of 1e-4 or below learns next to nothing in a few epochs: hopeless."""

import sys

import keras
import numpy as np

lr = float(sys.argv[1])
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 8
small = "--small" in sys.argv  # a CPU smoke test: a tenth of the data, narrow layers
count, widths = (1_280, (8, 16, 32)) if small else (12_800, (64, 128, 256))
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
templates = rng.normal(size=(10, 32, 32, 3)).astype("float32")
labels = rng.integers(0, 10, count)
images = templates[labels] * 0.5 + rng.normal(size=(count, 32, 32, 3)).astype("float32")
model = keras.Sequential(
    [keras.Input((32, 32, 3))]
    + [
        layer
        for filters in widths
        for layer in (
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
        )
    ]
    + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
)
model.compile(
    keras.optimizers.SGD(lr, momentum=0.9),
    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(images, labels, batch_size=128, epochs=epochs, verbose=0, validation_split=0.2)
