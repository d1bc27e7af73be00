"""A user's Keras script on jax, timed by its own callback, written the three ways a user would:

    python dp_train.py one [light|heavy]           # fit on one device (jax sees every GPU; it trains on one)
    python dp_train.py spread [light|heavy]        # keras.distribution.DataParallel written in, the same global batch
    python dp_train.py spread_batch [light|heavy]  # DataParallel and the global batch x the devices

An MLP in float32 on in-memory arrays, batch 1024: `light`, six 4096-wide layers on 4096 inputs
(16 MiB of host arrays a batch: the host's copy caps it), `heavy`, four 8192-wide layers on 1024
inputs (4 MiB a batch, 1.3 TFLOP a step: the GPU's compute caps it). After WARMUP steps it
times MEASURED steps in windows of WINDOW steps and prints one JSON line: the windows' samples/s
(benchmarks/data_parallel_script.py reads it; gpuscout watch/tune stop it at their own --steps).
"""
import json
import os
import sys
import time

import keras
import numpy as np

mode = sys.argv[1]
shape = sys.argv[2] if len(sys.argv) > 2 else "light"
# tiny: a CPU rehearsal of benchmarks/data_parallel_script.py (XLA_FLAGS=--xla_force_host_platform_device_count=2)
inputs, width, depth = {"heavy": (1024, 8192, 4), "light": (4096, 4096, 6), "tiny": (256, 256, 2)}[shape]
WARMUP, MEASURED, WINDOW = 20, 200, 20
# benchmarks/data_parallel_script.py --parts anatomy: jax's profiler over TRACED steps from the 120th
TRACE_DIR, TRACE_FROM, TRACED = os.environ.get("DP_TRACE_DIR"), 120, 10
devices = len(keras.distribution.list_devices())
if mode in ("spread", "spread_batch"):
    keras.distribution.set_distribution(keras.distribution.DataParallel())
batch = 1024 * (devices if mode == "spread_batch" else 1)
rng = np.random.default_rng(0)
x = rng.normal(size=(32 * 1024, inputs)).astype("float32")
y = rng.integers(0, 10, size=32 * 1024)
model = keras.Sequential([keras.Input((inputs,))] + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
                         + [keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Timer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.marks = []

    def on_train_batch_end(self, step, logs=None):
        self.marks.append(time.perf_counter())  # Keras waits for each step's logs here: a synchronised clock
        if TRACE_DIR and len(self.marks) in (TRACE_FROM, TRACE_FROM + TRACED):
            import jax

            if len(self.marks) == TRACE_FROM:
                jax.profiler.start_trace(TRACE_DIR, create_perfetto_trace=True)
            else:
                jax.profiler.stop_trace()
        if len(self.marks) == WARMUP + MEASURED + 1:
            self.model.stop_training = True


timer = Timer()
model.fit(x, y, batch_size=batch, epochs=1000, verbose=0, callbacks=[timer])
marks = timer.marks[WARMUP:]
rates = [WINDOW * batch / (marks[i + WINDOW] - marks[i]) for i in range(0, len(marks) - WINDOW, WINDOW)]
print(json.dumps({"mode": mode, "shape": shape, "devices": devices, "batch": batch, "window_samples_per_s": rates}), flush=True)
