"""TensorFlow backend, child side: Keras' own train_step in a tf.function, XLA on or off.

This is what ``model.fit`` compiles (keras/src/backend/tensorflow/trainer.py,
make_train_function), fed from device-resident tensors or from a tf.data pipeline.
"""

from __future__ import annotations

import time

from gpuscout.measure import data
from gpuscout.measure.protocol import StepRunner
from gpuscout.spec import DataMode, RunSpec
from gpuscout.workloads.base import Workload


def framework_info() -> dict:
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    return {
        "backend_version": tf.__version__,
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "platform": "gpu" if tf.config.list_physical_devices("GPU") else "cpu",
        "cuda_version": build.get("cuda_version"),  # what TF was built against
        "cudnn_version": build.get("cudnn_version"),
    }


def tf_dataset(tf, x, y, spec: RunSpec, workload: Workload):
    """The host pipeline. Tuned (data=pipeline): cache, parallel per-sample map, batch, prefetch
    (the tf.data performance guide). Naive (data=naive): the same map on one thread, no prefetch."""
    image = workload.input_kind == "image"
    tuned = spec.data is not DataMode.naive
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if tuned:
        dataset = dataset.cache()
    dataset = dataset.shuffle(len(x), seed=spec.seed).repeat()

    def augment(sample, label):
        out = tf.cast(sample, tf.float32) * (1.0 / 255.0 if image else 1.0)
        for _ in range(spec.pipeline_cost):
            if image:
                out = tf.image.random_flip_left_right(out)
            out = out * tf.random.uniform((), 0.95, 1.05)
            out = out - tf.reduce_mean(out)
        return out, label

    if workload.input_kind not in ("tokens", "ids"):  # ids arrive ready: nothing to decode
        calls = (spec.pipeline_threads or tf.data.AUTOTUNE) if tuned else None
        dataset = dataset.map(augment, num_parallel_calls=calls, deterministic=not tuned)
    dataset = dataset.batch(spec.batch_size, drop_remainder=True)
    if not tuned:
        options = tf.data.Options()  # really one thread: no autotuned parallelism anywhere
        options.threading.private_threadpool_size = 1
        options.autotune.enabled = False
        return dataset.with_options(options)
    return dataset.prefetch(tf.data.AUTOTUNE)


def device_peak_memory_bytes() -> int | None:
    """TensorFlow's allocator peak on the first GPU (None on a CPU)."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def build_runner(spec: RunSpec, workload: Workload, keras) -> StepRunner:
    import tensorflow as tf

    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    model = workload.build_model(keras, spec.seq_len)
    model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras), jit_compile=spec.xla)
    host_batches = data.synthetic_batches(workload, spec.batch_size, spec.seed, spec.seq_len)
    # Creates the optimizer's and the loss tracker's variables outside the tf.function.
    model._symbolic_build(data_batch=host_batches[0])
    train_step = tf.function(model.train_step, jit_compile=spec.xla, reduce_retracing=True)
    waited = [0.0]

    if spec.data is DataMode.synthetic:
        with tf.device("/GPU:0" if on_gpu else "/CPU:0"):
            device_batches = [(tf.constant(x), tf.constant(y)) for x, y in host_batches]
        next_batch = lambda i: device_batches[i % len(device_batches)]  # noqa: E731
    else:
        x, y = data.host_dataset(workload, spec.batch_size, spec.seed, spec.seq_len)
        iterator = iter(tf_dataset(tf, x, y, spec, workload))

        def next_batch(i):
            start = time.monotonic()
            batch = next(iterator)
            waited[0] += time.monotonic() - start
            return batch

    def step(i: int):
        return train_step(next_batch(i))

    def sync(logs) -> float:
        return float(logs["loss"])  # .numpy() waits for the step (and all before it)

    return StepRunner(step, sync, lambda: waited[0], device_peak_memory_bytes,
                      compiled=f"tf.function(keras Model.train_step, jit_compile={spec.xla})")
