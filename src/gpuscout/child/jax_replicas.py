"""Data parallelism on the jax backend with batch-norm statistics per replica (child side).

`keras.distribution.DataParallel` shards the batch as one array, so XLA's partitioner makes every
BatchNormalization layer average its statistics over the *global* batch: two small all-reduces in
each BN layer's forward pass and more in its backward pass, on the critical path (ResNet-50 on
two H200s: 4-5 ms a step, 89-94% efficiency against DDP's 99%; docs/benchmarks.md, "Scaling").
tf.distribute.MirroredStrategy and PyTorch DDP keep the statistics per replica. This step does
the same under jax: the step runs per device under `jax.shard_map`, each device normalising its
own shard, and only what must agree is averaged across devices afterwards:

- the gradients (the mean over replicas of per-shard mean losses' gradients, which is the global
  batch's gradient for equal shards, as DDP's averaging all-reduce), in buckets that the step
  concatenates and slices itself, as DDP's buckets (`bucketed_mean`);
- float non-trainable state, i.e. the moving mean and variance: the mean of the replicas' updated
  averages (MirroredStrategy's MEAN aggregation of BN's moving-average assignments);
- float metric state and the logs, so that every device holds the same state afterwards.

Random-number state (Keras' SeedGenerator, [seed, counter], e.g. for Dropout) has the replica
index added to its seed before the step, so that replicas draw different masks, and replica 0's
advanced state is kept.
"""

from __future__ import annotations

AXIS = "replicas"


def mesh(devices):
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.asarray(devices), (AXIS,))


def shardings(the_mesh):
    """(replicated: for the training state, split along the first axis: for a batch)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(the_mesh, PartitionSpec()), NamedSharding(the_mesh, PartitionSpec(AXIS))


# Measured on two H200s (2026-11-26, benchmarks/step_buckets.py; docs/benchmarks.md, "Gradient
# buckets made in the step"): the best buckets were 8 MiB for ResNet-50's 97.8 MiB of gradients and
# 64 MiB for BERT-base's 506 MiB and GPT-2 small's 622 MiB; 256 MiB lost, and so did 2-4 MiB for
# ResNet-50 and 8-25 MiB for the transformers. Those workloads name their size
# (Workload.gradient_bucket_mib); other models get an eighth of their gradients, which gives the
# transformers 63-64 MiB and ResNet-50 12 MiB (97.7% against 98.7% at 8 MiB, 96.0% without).
BUCKETS_PER_MODEL = 8
LARGEST_BUCKET_BYTES = 64 * 2**20
SMALLEST_BUCKET_BYTES = 2**20


def bucket_size_bytes(gradient_bytes: int, measured_mib: float | None = None) -> int:
    """The bucket size of the per-replica step for a model of `gradient_bytes` of float gradients:
    the workload's measured size where it has one, else an eighth of the gradients in whole MiB,
    within 1 and 64 MiB (a model smaller than 8 MiB averages its gradients in one or a few buckets)."""
    if measured_mib is not None:
        return int(measured_mib * 2**20)
    eighth = gradient_bytes // BUCKETS_PER_MODEL // 2**20 * 2**20
    return max(SMALLEST_BUCKET_BYTES, min(LARGEST_BUCKET_BYTES, eighth))


def float_bytes(values) -> int:
    """Bytes of the float arrays among `values` (what `bucketed_mean` averages)."""
    import jax.numpy as jnp

    return sum(v.size * v.dtype.itemsize for v in values if jnp.issubdtype(v.dtype, jnp.floating))


def buckets(sizes_bytes: list[int], bucket_bytes: int) -> list[list[int]]:
    """Indices of arrays of these sizes, last first (a backward pass computes the last layer's
    gradients first), cut into runs of at least `bucket_bytes` (the last run may be smaller)."""
    cut, current, size = [], [], 0
    for i in reversed(range(len(sizes_bytes))):
        current.append(i)
        size += sizes_bytes[i]
        if size >= bucket_bytes:
            cut.append(current)
            current, size = [], 0
    return cut + [current] if current else cut


def bucketed_mean(values: list, bucket_bytes: int, wire_dtype=None) -> list:
    """The mean over replicas of each float array in `values` (others pass through), as one
    all-reduce per bucket of a dtype: its arrays flattened and concatenated, averaged, then sliced
    apart in the step itself. The values are those of a `lax.pmean` of each. XLA's own combiner
    concatenates too, but slices afterwards, each slice a copy kernel of its own (two-GPU ResNet-50:
    292 a step; docs/benchmarks.md, "Seven more settings on two H200s"); slices made here are
    ordinary ones that XLA can fuse into the kernels that read them (two-GPU ResNet-50: 14 copies
    a step instead of 400, and 98.7% efficiency instead of 96.0%; benchmarks/step_buckets.py).
    `wire_dtype` (bfloat16): each bucket averaged in that dtype and cast back, half the bytes of
    float32 on the wire, as DDP's bf16_compress_hook (measured only: benchmarks/step_buckets.py)."""
    import jax.numpy as jnp
    from jax import lax

    out = list(values)
    floats = [i for i, v in enumerate(values) if jnp.issubdtype(v.dtype, jnp.floating)]
    for dtype in dict.fromkeys(values[i].dtype for i in floats):
        same = [i for i in floats if values[i].dtype == dtype]
        for bucket in buckets([values[i].size * values[i].dtype.itemsize for i in same], bucket_bytes):
            members = [same[j] for j in bucket]
            flat = jnp.concatenate([jnp.ravel(values[i]) for i in members])
            if wire_dtype is not None and flat.dtype != wire_dtype:
                flat = lax.pmean(flat.astype(wire_dtype), AXIS).astype(dtype)
            else:
                flat = lax.pmean(flat, AXIS)
            offset = 0
            for i in members:
                out[i] = flat[offset : offset + values[i].size].reshape(values[i].shape)
                offset += values[i].size
    return out


def per_replica_train_step(model, the_mesh, bucket_bytes: int | None = None, gradient_wire_dtype=None):
    """A jitted `step(state, batch) -> (logs, state)` with the signature of Keras' JAX
    `train_step` (keras/src/backend/jax/trainer.py) whose state is replicated over `the_mesh`
    and whose batch is split over it; the state argument is donated. With `bucket_bytes` (what
    gpuscout's child passes: `bucket_size_bytes`) the gradients and the float state are averaged by
    `bucketed_mean`, else by a pmean of each (XLA combining them into buckets; gpuscout's step
    before 2026-11-26, kept for benchmarks/step_buckets.py's comparison); `gradient_wire_dtype`: the
    gradients' buckets exchanged in it (`bucketed_mean`; benchmarks/step_buckets.py only)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec
    from keras.src.trainers.data_adapters import data_adapter_utils

    seeds = [i for i, v in enumerate(model.non_trainable_variables) if v.path.endswith("seed_generator_state")]

    def floats_mean(values):
        if bucket_bytes:
            return bucketed_mean(list(values), bucket_bytes)
        return [lax.pmean(v, AXIS) if jnp.issubdtype(v.dtype, jnp.floating) else v for v in values]

    def replica(state, batch):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(batch)
        index = lax.axis_index(AXIS)
        non_trainable = list(non_trainable)
        for i in seeds:
            non_trainable[i] = non_trainable[i] + jnp.asarray([1, 0], non_trainable[i].dtype) * index.astype(
                non_trainable[i].dtype
            )
        (_, aux), grads = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)(
            trainable,
            non_trainable,
            metrics_variables,
            x,
            y,
            sample_weight,
            training=True,
            optimizer_variables=optimizer_variables,
        )
        unscaled_loss, y_pred, non_trainable, metrics_variables = aux
        grads = (
            bucketed_mean(list(grads), bucket_bytes, gradient_wire_dtype) if bucket_bytes else lax.pmean(grads, AXIS)
        )
        non_trainable = floats_mean(non_trainable)
        for i in seeds:
            non_trainable[i] = lax.all_gather(non_trainable[i], AXIS)[0]
        trainable, optimizer_variables = model.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        logs, metrics_variables = model._update_metrics_variables(
            metrics_variables, unscaled_loss, x, y, y_pred, sample_weight
        )
        logs = jax.tree.map(lambda t: lax.pmean(t, AXIS), logs)
        return logs, (trainable, non_trainable, optimizer_variables, floats_mean(metrics_variables))

    replicated, split = PartitionSpec(), PartitionSpec(AXIS)
    # check_vma off: the integer state kept from replica 0 is the same on every device by
    # construction, which the replication checker cannot see.
    stepped = jax.shard_map(
        replica, mesh=the_mesh, in_specs=(replicated, split), out_specs=(replicated, replicated), check_vma=False
    )
    return jax.jit(stepped, donate_argnums=0)
