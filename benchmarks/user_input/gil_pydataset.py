"""A user's script whose PyDataset does per-sample Python work that holds the GIL (a pure-Python
augmentation), random each epoch (nothing to cache), feeding a small model: worker threads cannot
run it in parallel, worker processes can (issue 60, item 3).

    python gil_pydataset.py [WORKERS] [processes]   # as left: Keras' default, one worker thread
    python gil_pydataset.py WORKERS spawned         # by hand: tune's SpawnedWorkers, new interpreters
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

WORKERS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
PROCESSES = len(sys.argv) > 2 and sys.argv[2] == "processes"
SPAWNED = len(sys.argv) > 2 and sys.argv[2] == "spawned"


class Augmenting(keras.utils.PyDataset):
    def __init__(self):
        super().__init__(workers=1 if SPAWNED else WORKERS, use_multiprocessing=PROCESSES)
        self.x = np.random.RandomState(0).rand(64 * 32, 32).astype("float32")

    def __len__(self):
        return 32

    def __getitem__(self, i):
        total = 0
        for k in range(120_000):  # bytecode under the GIL, a few ms a batch
            total += k * k
        batch = self.x[i * 64:(i + 1) * 64] + np.random.default_rng().normal(size=(64, 32)).astype("float32") * 0.01
        return batch, (batch.sum(1) > 16).astype("int32")


model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
if SPAWNED:  # the class tune's patch writes (gpuscout/child/spawned_workers.py), imported here
    from gpuscout.child.spawned_workers import SpawnedWorkers

    model.fit(SpawnedWorkers(Augmenting(), workers=WORKERS), epochs=1000, verbose=0)
else:
    model.fit(Augmenting(), epochs=1000, verbose=0)
