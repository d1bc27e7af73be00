"""A user's script (it knows nothing of gpuscout): ResNet-50 on in-memory uint8 images, fed by a
PyDataset whose augment() crops a random 224x224 from each 256x256 image, flips half and
normalises it per channel by ImageNet's mean and spread (in float64, as numpy does by default),
one image at a time, in Keras' default one worker thread (issue 60, item 3).

    python augmenting_images.py            # as left
    python augmenting_images.py by-hand    # the fix by hand: the crops cut on the host as uint8, flipped
                                           # and normalised in the model on the device, mixed_bfloat16

SMALL=1: a small CNN on 40x40 crops of 48x48 images (a CPU smoke test).
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

BY_HAND = len(sys.argv) > 1 and sys.argv[1] == "by-hand"
SMALL = os.environ.get("SMALL") == "1"
SIDE, CROP = (48, 40) if SMALL else (256, 224)
BATCH, STEPS = (32, 16) if SMALL else (128, 16)
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
keras.utils.set_random_seed(0)
if BY_HAND:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")


def augment(image, rng):
    top, left = rng.integers(0, SIDE - CROP + 1, 2)
    out = image[top:top + CROP, left:left + CROP]
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return ((out / 255.0 - MEAN) / STD).astype("float32")


class Images(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.images = np.random.default_rng(0).integers(0, 256, (BATCH * STEPS, SIDE, SIDE, 3), dtype=np.uint8)
        self.labels = np.random.default_rng(1).integers(0, 1000, BATCH * STEPS)
        self.rng = np.random.default_rng(2)

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        picked = self.rng.integers(0, len(self.images), BATCH)
        if BY_HAND:  # the crops as uint8 (a copy each): the model flips and normalises them on the device
            corners = self.rng.integers(0, SIDE - CROP + 1, (BATCH, 2))
            crops = np.stack([self.images[p, r:r + CROP, c:c + CROP] for p, (r, c) in zip(picked, corners)])
            return crops, self.labels[picked]
        return np.stack([augment(self.images[p], self.rng) for p in picked]), self.labels[picked]


if SMALL:
    inputs = keras.Input((CROP, CROP, 3))
    h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, keras.layers.Dense(1000)(h))
else:
    model = keras.applications.ResNet50(weights=None, input_shape=(CROP, CROP, 3), classes=1000,
                                        classifier_activation=None)
if BY_HAND:
    model = keras.Sequential([keras.Input((CROP, CROP, 3)), keras.layers.RandomFlip("horizontal"),
                              keras.layers.Normalization(mean=MEAN * 255, variance=(STD * 255) ** 2), model])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(Images(), epochs=1000, verbose=0)
