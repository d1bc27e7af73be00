"""JAX backend, child side: Keras' own train_step, jitted with donated state, on device data.

This is what ``model.fit`` compiles (keras/src/backend/jax/trainer.py, make_train_function),
minus fit's per-step host work: its data adapter copies numpy batches to the device every step
(ResNet-50 on an H200: 2,826 img/s through fit, 6,660 with this step; shared/docs/ANCHORS.md).
"""

from __future__ import annotations

import time

from gpuscout.child import collectives, data, jax_replicas
from gpuscout.child.model_facts import model_details
from gpuscout.child.protocol import StepRunner
from gpuscout.core.spec import BatchNormStats, DataMode, Distribution, RunSpec
from gpuscout.workloads.base import Workload


def framework_info() -> dict:
    import jax

    info = {
        "backend_version": jax.__version__,
        "devices": [d.device_kind for d in jax.local_devices()],
        "platform": jax.default_backend(),
        "cuda_version": None,
        "cudnn_version": None,
    }
    try:
        from jax._src.lib import cuda_versions  # the CUDA plugin's version queries
    except ImportError:
        cuda_versions = None
    if cuda_versions is not None and jax.default_backend() == "gpu":
        info["cuda_version"] = _cuda_version(getattr(cuda_versions, "cuda_runtime_get_version", None))
        info["cudnn_version"] = _cudnn_version(getattr(cuda_versions, "cudnn_get_version", None))
    return info


def _cuda_version(query) -> str | None:
    try:
        value = int(query())  # e.g. 12080
    except Exception:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _cudnn_version(query) -> str | None:
    try:
        value = int(query())  # e.g. 90800 (cuDNN 9: major*10000 + minor*100 + patch)
    except Exception:
        return None
    return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"


def configure_devices(spec: RunSpec) -> None:
    """Nothing to do before jax starts: the executor set XLA_FLAGS for several CPU devices."""


def device_peak_memory_bytes() -> int | None:
    """The allocator's peak, the largest over the devices in use (what must fit on each GPU);
    None on a CPU, which keeps no such count."""
    import jax

    peaks = [
        int(stats["peak_bytes_in_use"])
        for d in jax.local_devices()
        if (stats := d.memory_stats()) and "peak_bytes_in_use" in stats
    ]
    return max(peaks) if peaks else None


class _Placement:
    """Where a run's state and batches live, and the step that trains on them.

    One device: Keras' own train_step, jitted. Several, per-replica batch norm (the default):
    jax_replicas.per_replica_train_step over a mesh of the devices. Several, global batch norm:
    keras.distribution.DataParallel, as fit() runs it: variables replicated, each batch split
    along its first axis (keras/src/backend/jax/trainer.py, _distribute_data), XLA inserting the
    gradient all-reduce and BN's statistics all-reduces (NCCL on GPUs)."""

    def __init__(self, spec: RunSpec, keras) -> None:
        import jax

        devices = jax.local_devices()
        stats = spec.batchnorm_stats
        self.details: dict = {}
        self.mesh, self.device = None, None
        if spec.distribution is Distribution.single:
            self.device = devices[0]
            self.put = lambda batch: jax.device_put(batch, self.device)
            return
        if len(devices) < spec.devices:
            raise RuntimeError(f"jax sees {len(devices)} device(s), the run asked for {spec.devices}")
        devices = devices[: spec.devices]
        reduce = "XLA all-reduce (NCCL on GPUs)" if devices[0].platform == "gpu" else "XLA all-reduce"
        if stats is BatchNormStats.global_:
            distribution = keras.distribution.DataParallel(devices=devices)
            keras.distribution.set_distribution(distribution)  # before the model exists: its variables follow
            layout = distribution.get_data_layout
            self.put = lambda batch: tuple(jax.device_put(a, layout(a.shape).backend_layout) for a in batch)
            strategy = "keras.distribution.DataParallel"
        else:
            self.mesh = jax_replicas.mesh(devices)
            self.replicated, split = jax_replicas.shardings(self.mesh)
            self.put = lambda batch: jax.device_put(batch, split)
            strategy = "jax.shard_map data parallel (gpuscout)"
        self.details = {
            "strategy": strategy,
            "replicas": spec.devices,
            "all_reduce": reduce,
            "batchnorm": stats.value if stats else None,
        }

    def train_step(self, model, state, gradient_bucket_mib: float | None = None):
        """(the jitted step, the state placed for it). Over several devices with per-replica
        statistics the gradients are averaged in buckets of the workload's measured size, else of
        jax_replicas' rule for the model's size; the record keeps the size."""
        import jax

        if self.mesh is not None:
            bucket = jax_replicas.bucket_size_bytes(jax_replicas.float_bytes(state[0]), gradient_bucket_mib)
            self.details["gradient_bucket_bytes"] = bucket
            return (
                jax_replicas.per_replica_train_step(model, self.mesh, bucket),
                jax.device_put(state, self.replicated),
            )
        if self.device is not None:
            # Committed to the device before the first step: Keras' variables are uncommitted
            # arrays, and the step's outputs (committed) would make the second call compile the
            # step again (a jit cache miss on the inputs' sharding: one more full compile per run).
            state = jax.device_put(state, self.device)
        # The updated state keeps the layout it came in (replicated across devices), as fit() pins it.
        shardings = tuple([value.sharding for value in part] for part in state)
        return jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, shardings)), state


def build_runner(spec: RunSpec, workload: Workload, keras) -> StepRunner:
    placement = _Placement(spec, keras)
    put = placement.put
    model = workload.build_model(keras, spec.seq_len)
    model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras), jit_compile=True)
    host_batches = data.synthetic_batches(workload, spec.batch_size, spec.seed, spec.seq_len)
    # Creates the optimizer's and the loss tracker's variables, as fit() does before its loop.
    model._symbolic_build(data_batch=host_batches[0])
    train_step, placed = placement.train_step(
        model,
        (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in model.optimizer.variables],
            [v.value for v in model.metrics_variables],
        ),
        workload.gradient_bucket_mib,
    )
    state = [placed]

    if spec.data is DataMode.synthetic:
        device_batches = [put(b) for b in host_batches]
        next_batch = lambda i: device_batches[i % len(device_batches)]  # noqa: E731
        wait = _WaitClock()
    else:
        batches, wait = _pipeline(spec, workload, put)
        next_batch = lambda i: next(batches)  # noqa: E731

    last_batch = [None]

    def step(i: int):
        last_batch[0] = next_batch(i)
        logs, state[0] = train_step(state[0], last_batch[0])
        return logs

    def sync(logs) -> float:
        return float(logs["loss"])  # fetching the value waits for the step (and all before it)

    def details_after() -> dict:
        """The collectives of the step as XLA compiled it (several devices only). Lowering again with
        the same arguments finds jit's compiled program in its cache (pjit's _pjit_lower and
        MeshComputation.compile keep it): no compile, a few ms to print and read it."""
        if not placement.details or last_batch[0] is None:
            return {}
        try:
            text = train_step.lower(state[0], last_batch[0]).compile().as_text()
        except Exception:  # an observation only: the measured windows stand without it (field left None)
            return {}
        return {"collectives": collectives.schedule(text)}

    return StepRunner(
        step,
        sync,
        wait.total,
        details_after=details_after,
        compiled=(
            "jax.jit(shard_map(keras compute_loss_and_updates + bucketed pmean + stateless_apply))"
            if placement.mesh is not None
            else "jax.jit(keras Model.train_step, donate_argnums=0)"
        ),
        details={**placement.details, **model_details(model, keras)},
    )


class _WaitClock:
    """Cumulative time the training loop spent blocked on its input."""

    def __init__(self) -> None:
        self._seconds = 0.0

    def add(self, seconds: float) -> None:
        self._seconds += seconds

    def total(self) -> float:
        return self._seconds


def _pipeline(spec: RunSpec, workload: Workload, put):
    """Host pipeline: tf.data when TensorFlow is installed (GPU hidden from it), else numpy."""
    x, y = data.host_dataset(workload, spec.batch_size, spec.seed, spec.seq_len)
    try:
        import tensorflow as tf
    except ImportError:
        host_iter = data.numpy_pipeline(x, y, spec, workload)
    else:
        tf.config.set_visible_devices([], "GPU")  # TF must not take the GPU from JAX
        tf.random.set_seed(spec.seed)  # worker.set_seed left TensorFlow unimported, so unseeded
        from gpuscout.child.tensorflow_steps import tf_dataset

        host_iter = tf_dataset(tf, x, y, spec, workload).as_numpy_iterator()

    wait = _WaitClock()
    # Two batches in flight on the device, as flax.jax_utils.prefetch_to_device does (none: naive).
    ahead: list = [put(next(host_iter)) for _ in range(0 if spec.data is DataMode.naive else 2)]

    def batches():
        while True:
            start = time.monotonic()
            ahead.append(put(next(host_iter)))
            wait.add(time.monotonic() - start)
            yield ahead.pop(0)

    # (naive: the list is empty before the append, so each batch is made when the step asks)

    return batches(), wait
