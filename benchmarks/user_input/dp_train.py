"""A user's Keras script on jax, timed by its own callback, written the three ways a user would:

    python dp_train.py one            # fit on one device (jax sees every GPU; it trains on one)
    python dp_train.py spread         # keras.distribution.DataParallel written in, the same global batch
    python dp_train.py spread_batch   # DataParallel and the global batch x the devices

An MLP of six 4096-wide layers in float32 on in-memory arrays, batch 1024. After WARMUP steps it
times MEASURED steps in windows of WINDOW steps and prints one JSON line: the windows' samples/s
(benchmarks/data_parallel_script.py reads it; gpuscout watch/tune stop it at their own --steps).
"""
import json
import sys
import time

import keras
import numpy as np

mode = sys.argv[1]
WARMUP, MEASURED, WINDOW = 20, 200, 20
devices = len(keras.distribution.list_devices())
if mode in ("spread", "spread_batch"):
    keras.distribution.set_distribution(keras.distribution.DataParallel())
batch = 1024 * (devices if mode == "spread_batch" else 1)
rng = np.random.default_rng(0)
x = rng.normal(size=(32 * 1024, 4096)).astype("float32")
y = rng.integers(0, 10, size=32 * 1024)
model = keras.Sequential([keras.Input((4096,))] + [keras.layers.Dense(4096, activation="relu") for _ in range(6)]
                         + [keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Timer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.marks = []

    def on_train_batch_end(self, step, logs=None):
        self.marks.append(time.perf_counter())  # Keras waits for each step's logs here: a synchronised clock
        if len(self.marks) == WARMUP + MEASURED + 1:
            self.model.stop_training = True


timer = Timer()
model.fit(x, y, batch_size=batch, epochs=1000, verbose=0, callbacks=[timer])
marks = timer.marks[WARMUP:]
rates = [WINDOW * batch / (marks[i + WINDOW] - marks[i]) for i in range(0, len(marks) - WINDOW, WINDOW)]
print(json.dumps({"mode": mode, "devices": devices, "batch": batch, "window_samples_per_s": rates}), flush=True)
