"""The clock a user times their own training with, as the benchmarks' user scripts import it:
each epoch's wall time from the end of the one before (validation and callbacks in), the steps
fit ran in it, and the samples the script asked for in it. Printed to stdout as

    clock epoch=3 steps=40 samples=5120 seconds=0.1812

async_safe: its batch hook reads only the step index, so Keras dispatches as it would without it."""
import time

import keras


class Clock(keras.callbacks.Callback):
    async_safe = True

    def __init__(self, samples_per_epoch):
        super().__init__()
        self.samples, self.steps, self.last = samples_per_epoch, 0, None

    def on_train_begin(self, logs=None):
        self.last = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        # the call's last step index (steps_per_execution calls it once per call); dispatched to a
        # thread (async_safe), so the calls may end out of order: the largest
        self.steps = max(self.steps, batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        print(f"clock epoch={epoch + 1} steps={self.steps} samples={self.samples} seconds={now - self.last:.4f}",
              flush=True)
        self.last = now
