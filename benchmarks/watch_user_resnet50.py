"""A user's ResNet-50 training script, written as a user would (Keras fit, bf16, the jax
backend), for benchmarks/watch_on_gpu.py. It knows nothing of gpuscout; it prints each epoch's
wall time itself, which is what the overhead of `gpuscout watch` is measured on.

    python benchmarks/watch_user_resnet50.py cached --epochs 7       # data on the GPU, device batches
    python benchmarks/watch_user_resnet50.py arrays --epochs 7       # the same JAX arrays given to fit(x, y)
    python benchmarks/watch_user_resnet50.py generator --epochs 100  # a Python generator, per-image work
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("data", choices=["cached", "arrays", "generator"])
parser.add_argument("--epochs", type=int, default=7)
parser.add_argument("--steps-per-epoch", type=int, default=32)
parser.add_argument("--batch", type=int, default=256)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_bfloat16")
model = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000, classifier_activation=None)
model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)


class EpochTimes(keras.callbacks.Callback):
    """The user's own timing: wall time per epoch (Keras' logs at the epoch's end are synchronised)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1} {time.perf_counter() - self.began:.4f} s loss {logs['loss']:.4f}", flush=True)


samples = args.steps_per_epoch * args.batch
if args.data in ("cached", "arrays"):
    # The whole dataset on the GPU, made there
    key_x, key_y = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.uniform(key_x, (samples, 224, 224, 3), dtype="float32")
    y = jax.random.randint(key_y, (samples,), 0, 1000, dtype="int32")
    if args.data == "arrays":  # as most users would: Keras then gathers each batch on the host
        model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[EpochTimes()])
    else:

        def device_batches():  # slices of the arrays on the GPU: nothing crosses the host
            while True:
                for i in range(0, samples, args.batch):
                    yield x[i : i + args.batch], y[i : i + args.batch]

        model.fit(
            device_batches(),
            steps_per_epoch=args.steps_per_epoch,
            epochs=args.epochs,
            verbose=0,
            callbacks=[EpochTimes()],
        )
else:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(1024, 256, 256, 3), dtype=np.uint8)
    labels = rng.integers(0, 1000, size=1024).astype("int32")
    mean, std = np.array([0.485, 0.456, 0.406], "float32") * 255, np.array([0.229, 0.224, 0.225], "float32") * 255

    def batches():
        """Per image, in Python: a random 224 crop, a random flip, normalisation."""
        while True:
            picks = rng.integers(0, len(images), size=args.batch)
            batch = np.empty((args.batch, 224, 224, 3), "float32")
            for i, pick in enumerate(picks):
                top, left = rng.integers(0, 33, size=2)
                crop = images[pick, top : top + 224, left : left + 224]
                if rng.random() < 0.5:
                    crop = crop[:, ::-1]
                batch[i] = (crop - mean) / std
            yield batch, labels[picks]

    model.fit(batches(), steps_per_epoch=args.steps_per_epoch, epochs=args.epochs, verbose=0, callbacks=[EpochTimes()])
print("done", flush=True)
