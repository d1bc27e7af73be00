"""The code an input change adds to a user's script, as one text for both uses: `tune -- COMMAND`
imports it inside the script to apply the change (child/tune_overrides.py), and `tune --patch`
copies these definitions' source into the user's file (tune/patch.py reads it with `ast`, without
importing Keras), so what was measured is what the patch writes.

Each definition stands alone: it uses nothing but `keras` and the standard library, imported
inside it where the user's file may not have done so.
"""

import keras


# Read in fit's own thread (workers=1, no queue): Keras' worker queue costs more per batch than a
# lookup (on an H200 host it kept a cached epoch at 2x where the batches fed from memory ran 5x,
# docs/benchmarks.md). The docstrings below are copied into the user's file with the code.
class CachedBatches(keras.utils.PyDataset):
    """A PyDataset whose batches are the same every epoch, each made once and kept: every epoch
    after the first reads them from memory."""

    def __init__(self, inner):
        super().__init__(workers=1, use_multiprocessing=False)
        self.inner, self.kept = inner, {}

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        if index not in self.kept:
            self.kept[index] = self.inner[index]
        return self.kept[index]

    def on_epoch_end(self):
        self.inner.on_epoch_end()


def replayed(batches, period):
    """A generator whose batches repeat every `period` batches, read once and then replayed from
    memory in the same order."""
    kept = []
    for batch in batches:
        kept.append(batch)
        yield batch
        if len(kept) == period:
            break
    while kept:
        yield from kept


def read_ahead(batches, depth=8):
    """A generator read `depth` batches ahead by a background thread, so the next batches are made
    while the device computes (what a PyDataset with one worker does, for a plain generator)."""
    import queue
    import threading

    ahead = queue.Queue(maxsize=depth)
    end = object()

    def fill():
        try:
            for batch in batches:
                ahead.put(batch)
        except BaseException as exc:  # the generator's own error reaches fit, as it would have
            ahead.put(exc)
            return
        ahead.put(end)

    threading.Thread(target=fill, daemon=True).start()
    while (batch := ahead.get()) is not end:
        if isinstance(batch, BaseException):
            raise batch
        yield batch


# Not options.deterministic = False: elements out of order are other batches, another training
# (tune/same_training.py), for a gain only where one element is much slower than the rest.
def tuned_pipeline(dataset):
    """A tf.data dataset as the tf.data performance guide asks, from outside the pipeline:
    autotuning, maps run in parallel where they are stateless, and a prefetch at the end. The
    elements keep their order: the same batches as before."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = True
    options.experimental_optimization.map_parallelization = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


# The epoch's order is gathered on the device once and each batch is a slice of it: a gather a
# step with host indices ran a compiled MLP at 0.36x of fit's own host batches on an H200, where
# slices ran 1.5x (docs/benchmarks.md). The gathered copy holds the arrays a second time.
def device_slices(x, y, batch_size, shuffle=True):
    """Arrays moved to the device once, then handed to fit a batch at a time as slices taken there,
    instead of each batch gathered on the host and copied over every step. The batches are the
    ones fit(x, y, batch_size=batch_size, shuffle=shuffle) makes, in its order: a new permutation
    of the samples each epoch, drawn from NumPy's global generator as Keras draws it (shuffle="batch":
    within each batch; False: in order), the last batch partial. Give fit
    steps_per_epoch=math.ceil(len(x) / batch_size)."""
    import jax
    import numpy as np

    xs, ys = jax.device_put(x), jax.device_put(y)
    count = len(x)
    while True:
        if shuffle == "batch":
            starts = range(0, count, batch_size)
            order = np.concatenate([np.random.permutation(min(batch_size, count - s)) + s for s in starts])
        else:
            order = np.random.permutation(count) if shuffle else None
        if order is None:
            xe, ye = xs, ys
        else:  # the epoch's order, gathered on the device once
            picked = jax.device_put(order)
            xe, ye = xs[picked], ys[picked]
        for start in range(0, count, batch_size):
            yield xe[start : start + batch_size], ye[start : start + batch_size]


@keras.saving.register_keras_serializable(package="gpuscout")
class WarmedUpRate(keras.optimizers.schedules.LearningRateSchedule):
    """A learning rate (a number or a schedule, which keeps its shape) times `factor`, reached by
    a linear warm-up from the rate as it was over the first `warmup_steps` steps (Goyal et al.
    2017, section 2.2); saved and loaded with the model like Keras' own schedules."""

    def __init__(self, rate, factor, warmup_steps):
        self.rate, self.factor, self.warmup_steps = rate, factor, warmup_steps

    def __call__(self, step):
        base = self.rate(step) if callable(self.rate) else self.rate
        ramp = keras.ops.minimum(1.0, keras.ops.cast(step, "float32") / float(max(1, self.warmup_steps)))
        return base * (1.0 + (self.factor - 1.0) * ramp)

    def get_config(self):
        rate = keras.optimizers.schedules.serialize(self.rate) if callable(self.rate) else self.rate
        return {"rate": rate, "factor": self.factor, "warmup_steps": self.warmup_steps}

    @classmethod
    def from_config(cls, config):
        rate = config["rate"]
        rate = keras.optimizers.schedules.deserialize(rate) if isinstance(rate, dict) else rate
        return cls(rate, config["factor"], config["warmup_steps"])


def scaled_learning_rate(optimizer, factor, warmup_steps):
    """The optimizer's learning rate scaled for a batch made larger (WarmedUpRate), after compile.
    With warmup_steps=0, a rate given as a number is multiplied once and stays a number: a
    callback that sets the rate each epoch (LearningRateScheduler, ReduceLROnPlateau) cannot set a
    schedule, and would stop the training."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's own
    # the rate as made: Keras keeps a schedule here, where `learning_rate` gives only its value now
    rate = getattr(optimizer, "_learning_rate", None)
    if not isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        if not warmup_steps:
            optimizer.learning_rate = rate * factor
            return
    optimizer.learning_rate = WarmedUpRate(rate, factor, warmup_steps)


# Keras' RandomCrop draws one place per batch, and it and RandomTranslation turn XLA off for the
# whole model (supports_jit = False: a ResNet-50 behind them ran 50 images/s on an H100); this is
# two gathers, compiled with the step.
@keras.saving.register_keras_serializable(package="gpuscout")
class RandomCropEach(keras.layers.Layer):
    """A height x width crop at a random place in each image while training, the centre otherwise;
    with `pad_height`/`pad_width`, a border of `fill_value` around the image first (a random shift
    of up to that many pixels), or of the image mirrored at its edges (`fill_mode` "reflect", the
    edge pixel left out, as np.pad and tf.pad name it; "symmetric", the edge repeated)."""

    def __init__(
        self, height, width, pad_height=0, pad_width=0, fill_value=0.0, fill_mode="constant", seed=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.height, self.width, self.pad_height, self.pad_width = height, width, pad_height, pad_width
        self.fill_value, self.fill_mode, self.seed = fill_value, fill_mode, seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, images, training=True):
        ops = keras.ops
        if self.pad_height or self.pad_width:
            images = ops.pad(
                images,
                [[0, 0], [self.pad_height] * 2, [self.pad_width] * 2, [0, 0]],
                mode=self.fill_mode,
                constant_values=self.fill_value if self.fill_mode == "constant" else None,
            )
        batch, rows, cols, channels = ops.shape(images)
        if not training:
            top, left = (rows - self.height) // 2, (cols - self.width) // 2
            return images[:, top : top + self.height, left : left + self.width, :]
        tops = keras.random.randint((batch, 1), 0, rows - self.height + 1, seed=self.seed_generator)
        lefts = keras.random.randint((batch, 1), 0, cols - self.width + 1, seed=self.seed_generator)
        picked = ops.expand_dims(ops.expand_dims(tops + ops.arange(self.height), -1), -1)
        images = ops.take_along_axis(images, ops.broadcast_to(picked, (batch, self.height, cols, channels)), axis=1)
        picked = ops.expand_dims(ops.expand_dims(lefts + ops.arange(self.width), 1), -1)
        return ops.take_along_axis(images, ops.broadcast_to(picked, (batch, self.height, self.width, channels)), axis=2)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.height, self.width, input_shape[3])

    def get_config(self):
        return {
            **super().get_config(),
            "height": self.height,
            "width": self.width,
            "pad_height": self.pad_height,
            "pad_width": self.pad_width,
            "fill_value": self.fill_value,
            "fill_mode": self.fill_mode,
            "seed": self.seed,
        }
