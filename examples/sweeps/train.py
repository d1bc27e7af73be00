"""An ordinary Keras training script, as a sweep runs it: an MLP on the handwritten digits that
gpuscout ships (8x8 images, 10 classes), its settings from the command line. Nothing in it knows
about the sweep: gpuscout reads `fit`'s epoch logs (val_accuracy, val_loss, ...) as it trains.

    python examples/sweeps/train.py --lr 0.01 --wd 0.0001 --units 64 --epochs 20
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402

from gpuscout.core.datasets import digits  # noqa: E402  (the data; any loader of yours does)

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--wd", type=float, default=0.0)
parser.add_argument("--units", type=int, default=64)
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()

images, labels = digits()
x = images.reshape(len(images), 64) / 16.0
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(args.units, activation="relu"), keras.layers.Dense(10)]
)
model.compile(
    keras.optimizers.AdamW(args.lr, weight_decay=args.wd),
    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(
    x[:1400], labels[:1400], validation_data=(x[1400:], labels[1400:]), epochs=args.epochs, batch_size=64, verbose=0
)
