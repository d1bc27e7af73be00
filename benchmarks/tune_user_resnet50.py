"""A user's ResNet-50 training script, written as a user would, for benchmarks/tune_script_on_gpu.py:
`gpuscout tune -- python benchmarks/tune_user_resnet50.py MODE` measures what each fix buys on it.
It knows nothing of gpuscout.

    python benchmarks/tune_user_resnet50.py fp32-nojit   # float32, compile(jit_compile=False), data on the GPU
    python benchmarks/tune_user_resnet50.py pydataset    # a one-worker PyDataset doing per-image work
    ... --small                                          # a small CNN on 32x32 images (a CPU smoke test)
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["fp32-nojit", "pydataset"])
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--small", action="store_true")
args = parser.parse_args()

keras.utils.set_random_seed(0)
side = 32 if args.small else 224
if args.small:
    inputs = keras.Input((side, side, 3))
    x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(1000)(x))
else:
    model = keras.applications.ResNet50(
        weights=None, input_shape=(side, side, 3), classes=1000, classifier_activation=None
    )
model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=False if args.mode == "fp32-nojit" else "auto",
)

steps_per_epoch = 64
if args.mode == "fp32-nojit":
    # the data made on the GPU, handed to fit in device batches: the step is the limit
    key_x, key_y = jax.random.split(jax.random.PRNGKey(0))
    images = jax.random.uniform(key_x, (8 * args.batch, side, side, 3), dtype="float32")
    labels = jax.random.randint(key_y, (8 * args.batch,), 0, 1000, dtype="int32")

    def device_batches():
        while True:
            for i in range(0, 8 * args.batch, args.batch):
                yield images[i : i + args.batch], labels[i : i + args.batch]

    model.fit(device_batches(), steps_per_epoch=steps_per_epoch, epochs=1000, verbose=0)
else:

    class Decoded(keras.utils.PyDataset):
        """Each image 'decoded' and augmented on the host, one worker thread."""

        def __init__(self):
            super().__init__(workers=1, use_multiprocessing=False)
            self.raw = np.random.RandomState(0).randint(0, 255, (512, side + 32, side + 32, 3), dtype=np.uint8)

        def __len__(self):
            return steps_per_epoch

        def __getitem__(self, index):
            rng = np.random.default_rng(index)
            picks = rng.integers(0, len(self.raw), args.batch)
            corners = rng.integers(0, 32, (args.batch, 2))
            batch = np.stack([self.raw[p, r : r + side, c : c + side] for p, (r, c) in zip(picks, corners)])
            batch = batch[:, :, ::-1] if index % 2 else batch  # flip half the batches
            return batch.astype("float32") / 255.0, rng.integers(0, 1000, args.batch).astype("int32")

    model.fit(Decoded(), epochs=1000, verbose=0)
print("trained")
