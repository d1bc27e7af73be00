"""A user's script (it knows nothing of gpuscout): ResNet-50 on in-memory uint8 images, fed by a
PyDataset whose __getitem__ loops over the batch and, inline (no function of its own), crops a
random 224x224 from each 256x256 image, flips half and normalises it per channel by ImageNet's mean
and spread, in Keras' default one worker thread (issue 77). It prints its own clock: images/s of
each epoch, as its callback measures it.

    python inline_augmenting.py            # as left
    python inline_augmenting.py by-hand    # the fix by hand: __getitem__ hands the uint8 images as
                                           # stored; the crop, flip and normalisation run in the model

SMALL=1: a small CNN on 40x40 crops of 48x48 images (a CPU rehearsal).
"""
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

BY_HAND = len(sys.argv) > 1 and sys.argv[1] == "by-hand"
SMALL = os.environ.get("SMALL") == "1"
SIDE, CROP = (48, 40) if SMALL else (256, 224)
BATCH, STEPS = (32, 16) if SMALL else (128, 16)
MEAN = np.array([0.485, 0.456, 0.406], dtype="float32")
STD = np.array([0.229, 0.224, 0.225], dtype="float32")
keras.utils.set_random_seed(0)


class Images(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.images = np.random.default_rng(0).integers(0, 256, (BATCH * STEPS, SIDE, SIDE, 3), dtype=np.uint8)
        self.labels = np.random.default_rng(1).integers(0, 1000, BATCH * STEPS)
        self.order = np.arange(len(self.images))
        self.rng = np.random.default_rng(2)

    def __len__(self):
        return STEPS

    def on_epoch_end(self):
        np.random.shuffle(self.order)

    def __getitem__(self, i):
        idx = self.order[i * BATCH:(i + 1) * BATCH]
        batch = np.empty((len(idx), CROP, CROP, 3), dtype="float32")
        for k, j in enumerate(idx):
            top, left = self.rng.integers(0, SIDE - CROP + 1, 2)
            image = self.images[j, top:top + CROP, left:left + CROP]
            if self.rng.random() < 0.5:
                image = image[:, ::-1]
            batch[k] = (image / 255.0 - MEAN) / STD
        return batch, self.labels[idx]


class AsStored(Images):
    """The fix by hand: the images as stored, uint8; the model crops, flips and normalises them."""

    def __getitem__(self, i):
        idx = self.order[i * BATCH:(i + 1) * BATCH]
        return self.images[idx], self.labels[idx]


class Clock(keras.callbacks.Callback):
    """The script's own figure: images a second of each whole epoch."""

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1}: {BATCH * STEPS / (time.perf_counter() - self.start):.1f} images/s", flush=True)


if SMALL:
    inputs = keras.Input((CROP, CROP, 3))
    h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, keras.layers.Dense(1000)(h))
else:
    model = keras.applications.ResNet50(weights=None, input_shape=(CROP, CROP, 3), classes=1000,
                                        classifier_activation=None)
if BY_HAND:  # a crop per image that XLA compiles (Keras' RandomCrop turns XLA off and draws one per batch)
    from gpuscout.child.fixes import RandomCropEach

    model = keras.Sequential([keras.Input((SIDE, SIDE, 3)), RandomCropEach(CROP, CROP),
                              keras.layers.RandomFlip("horizontal"),
                              keras.layers.Normalization(mean=MEAN * 255, variance=(STD * 255) ** 2), model])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(AsStored() if BY_HAND else Images(), epochs=1000, verbose=0, callbacks=[Clock()])
