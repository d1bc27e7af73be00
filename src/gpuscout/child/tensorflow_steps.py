"""TensorFlow backend, child side: Keras' own train_step in a tf.function, XLA on or off.

This is what ``model.fit`` compiles (keras/src/backend/tensorflow/trainer.py,
make_train_function), fed from device-resident tensors or from a tf.data pipeline. Under a
tf.distribute strategy it is fit's distributed step: ``strategy.run(train_step)`` with the
logs reduced as fit reduces them (same file, _make_function and reduce_per_replica).
"""

from __future__ import annotations

import contextlib
import math
import time

from gpuscout.child import data
from gpuscout.child.model_facts import model_details
from gpuscout.child.protocol import StepRunner
from gpuscout.core.spec import BatchNormStats, DataMode, Distribution, RunSpec
from gpuscout.workloads.base import Workload

# The run's strategy, made by configure_devices() before TensorFlow initialises: a
# MultiWorkerMirroredStrategy must exist before any other TensorFlow op (tf.distribute guide).
_strategy = None


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


def configure_devices(spec: RunSpec) -> None:
    """Before TensorFlow initialises: split the CPU into logical devices for a CPU run over
    several devices, and make the run's strategy."""
    global _strategy
    import tensorflow as tf

    if spec.gpu_index is None and spec.devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * spec.devices)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    if spec.distribution is Distribution.multi_worker:
        implementation = (
            tf.distribute.experimental.CommunicationImplementation.NCCL
            if on_gpu
            else tf.distribute.experimental.CommunicationImplementation.RING
        )
        _strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        )
    elif spec.distribution is Distribution.mirrored:
        kind = "GPU" if on_gpu else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
        if len(devices) < spec.devices:
            raise RuntimeError(f"tensorflow sees {len(devices)} {kind} device(s), the run asked for {spec.devices}")
        # NCCL all-reduce on GPUs, as the issue and the tf.distribute guide recommend; on CPU
        # devices the strategy's own default (collective ops).
        ops = tf.distribute.NcclAllReduce() if on_gpu and spec.devices > 1 else None
        _strategy = tf.distribute.MirroredStrategy(devices[: spec.devices], cross_device_ops=ops)


def _all_reduce_name(strategy, tf) -> str | None:
    """What sums the gradients: the cross-device ops MirroredStrategy uses (NcclAllReduce on
    GPUs), or the collective implementation of a multi-worker strategy."""
    if strategy is None or strategy.num_replicas_in_sync == 1:
        return None
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return f"collective {strategy.extended._communication_options.implementation.name}"
    ops = getattr(strategy.extended, "_cross_device_ops", None)  # private: no public accessor
    return type(ops).__name__ if ops is not None else None


def tf_dataset(tf, x, y, spec: RunSpec, workload: Workload, batch_size: int | None = None):
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
    dataset = dataset.batch(batch_size or spec.batch_size, drop_remainder=True)
    if not tuned:
        options = tf.data.Options()  # really one thread: no autotuned parallelism anywhere
        options.threading.private_threadpool_size = 1
        options.autotune.enabled = False
        return dataset.with_options(options)
    return dataset.prefetch(tf.data.AUTOTUNE)


def device_peak_memory_bytes() -> int | None:
    """TensorFlow's allocator peak, the largest over the GPUs in use (None on a CPU)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return None
    return max(int(tf.config.experimental.get_memory_info(d.name)["peak"]) for d in gpus)


def build_runner(spec: RunSpec, workload: Workload, keras) -> StepRunner:
    import tensorflow as tf

    strategy = _strategy
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = workload.build_model(keras, spec.seq_len)
        if spec.batchnorm_stats is BatchNormStats.global_:
            # statistics all-reduced across replicas (keras/src/backend/tensorflow/nn.py,
            # moments(synchronized=True)); read when the step is traced, after this
            for layer in model._flatten_layers():
                if isinstance(layer, keras.layers.BatchNormalization):
                    layer.synchronized = True
        model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras), jit_compile=spec.xla)
        host_batches = data.synthetic_batches(workload, spec.batch_size, spec.seed, spec.seq_len)
        # Creates the optimizer's and the loss tracker's variables outside the tf.function.
        model._symbolic_build(data_batch=host_batches[0])
    waited = [0.0]
    if strategy is None:
        train_step = tf.function(model.train_step, jit_compile=spec.xla, reduce_retracing=True)
    else:

        @tf.function(reduce_retracing=True)  # no jit_compile: spec.py explains why
        def train_step(batch):
            logs = strategy.run(model.train_step, args=(batch,))
            # The replicas' logs averaged, as fit() does (keras' reduce_per_replica, "mean"; its
            # multi-worker branch reduces scalars along axis 0 and fails, so not called here).
            return {
                name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None) for name, value in logs.items()
            }

    if spec.data is DataMode.synthetic:
        if strategy is None:
            with tf.device("/GPU:0" if on_gpu else "/CPU:0"):
                device_batches = [(tf.constant(x), tf.constant(y)) for x, y in host_batches]
        else:
            device_batches = [_per_replica(strategy, tf, batch, spec) for batch in host_batches]
        next_batch = lambda i: device_batches[i % len(device_batches)]  # noqa: E731
    else:
        x, y = data.host_dataset(workload, spec.batch_size, spec.seed, spec.seq_len)
        if strategy is None:
            iterator = iter(tf_dataset(tf, x, y, spec, workload))
        else:
            # One pipeline per worker, batched per replica and sharded by worker, as the
            # tf.distribute input guide recommends (distribute_datasets_from_function).
            def per_worker(context):
                shard = tf_dataset(tf, x, y, spec, workload, batch_size=spec.per_device_batch_size)
                return shard.shard(context.num_input_pipelines, context.input_pipeline_id)

            iterator = iter(strategy.distribute_datasets_from_function(per_worker))

        def next_batch(i):
            start = time.monotonic()
            batch = next(iterator)
            waited[0] += time.monotonic() - start
            return batch

    def step(i: int):
        return train_step(next_batch(i))

    def sync(logs) -> float:
        return float(logs["loss"])  # .numpy() waits for the step (and all before it)

    details = model_details(model, keras)
    if strategy is not None:
        details.update(
            {
                "strategy": type(strategy).__name__,
                "replicas": int(strategy.num_replicas_in_sync),
                "all_reduce": _all_reduce_name(strategy, tf),
                "batchnorm": spec.batchnorm_stats.value if spec.batchnorm_stats else None,
            }
        )
    compiled = (
        f"tf.function(keras Model.train_step, jit_compile={spec.xla})"
        if strategy is None
        else f"tf.function({type(strategy).__name__}.run(keras Model.train_step)), no XLA"
    )
    return StepRunner(
        step, sync, lambda: waited[0], compiled=compiled, agree=_agree(strategy, tf, spec), details=details
    )


def _per_replica(strategy, tf, batch, spec: RunSpec):
    """A batch split over this worker's replicas, each part placed on its device."""
    per = spec.per_device_batch_size

    def part(context):
        local = context.replica_id_in_sync_group % spec.devices  # global id across workers
        return tuple(tf.constant(a[local * per : (local + 1) * per]) for a in batch)

    return strategy.experimental_distribute_values_from_function(part)


def _agree(strategy, tf, spec: RunSpec):
    """Multi-worker: every worker runs the mean of the window lengths they measured (one small
    all-reduce), so all run the same number of steps."""
    if spec.distribution is not Distribution.multi_worker:
        return lambda steps: steps

    def agree(steps: int) -> int:
        values = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(float(steps), tf.float64)
        )
        total = float(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None))
        return max(1, math.ceil(total / strategy.num_replicas_in_sync - 1e-9))

    return agree
