"""What each Keras preprocessing layer costs on the device, on a batch of ImageNet-sized images,
in Keras' compiled train step (jax): which of them tune may put in front of a model (issue 60,
item 3). Also the crop
written as two take_along_axis gathers (one place per image).

    python benchmarks/augment_layers_on_device.py [--batch 128] [--side 256]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--side", type=int, default=256)
args = parser.parse_args()
crop = args.side * 7 // 8
x = jax.device_put(np.random.default_rng(0).integers(0, 256, (args.batch, args.side, args.side, 3)).astype("float32"))
shift = (args.side - crop) / 2 / args.side


def timed(name, *layers):
    """Keras' own compiled train step (training=True) of the layers before a pooling and a Dense."""
    model = keras.Sequential(
        [keras.Input(x.shape[1:]), *layers, keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse", jit_compile=True)
    y = np.zeros((args.batch, 1), "float32")
    model.train_on_batch(x, y)
    model.train_on_batch(x, y)
    began = time.perf_counter()
    for _ in range(10):
        loss = model.train_on_batch(x, y)
    float(loss)
    ms = (time.perf_counter() - began) / 10 * 1000
    print(f"{name:50} {ms:9.2f} ms a batch  {args.batch / ms * 1000:12,.0f} images/s", flush=True)


timed("nothing (pooling and a Dense alone)")
timed("Rescaling(1 / 255)", keras.layers.Rescaling(1 / 255))
timed("RandomFlip('horizontal')", keras.layers.RandomFlip("horizontal"))
timed(
    "RandomTranslation(nearest, constant)",
    keras.layers.RandomTranslation(shift, shift, fill_mode="constant", interpolation="nearest"),
)
timed("CenterCrop", keras.layers.CenterCrop(crop, crop))
timed("Normalization", keras.layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 5.0, 6.0]))
