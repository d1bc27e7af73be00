"""What a built model and its framework say, read inside the child (Keras imported lazily): for
the harness's records (model_details) and for watch's instrumentation, once a fit has compiled
(model_facts: what the verdict needs; the devices the framework could train on; the allocator's
peak), apart from watch_fit's timing of the steps."""

from __future__ import annotations


def model_details(model, keras) -> dict:
    """What the scaling analysis needs to know about a model: its parameters (the all-reduce
    size) and its batch-normalisation layers (statistics over the batch: shared across devices
    under keras.distribution.DataParallel, per device under tf.distribute)."""
    return {
        "params": int(model.count_params()),
        "batchnorm_layers": sum(
            isinstance(layer, keras.layers.BatchNormalization) for layer in model._flatten_layers()
        ),
    }


def model_facts(model, x) -> dict:
    """What the verdict needs to know about the model and how fit was called."""
    import keras

    from gpuscout.child.fit_input import input_type  # watch's: the harness's children never load it

    facts = {
        "backend": keras.backend.backend(),
        "keras_version": keras.__version__,
        "model": getattr(model, "name", type(model).__name__),
        "params": int(model.count_params()),
        "input_type": input_type(x),
        "precision_policy": keras.mixed_precision.global_policy().name,
        "compute_dtype": str(getattr(model, "compute_dtype", None)),
        "jit_compile": bool(getattr(model, "jit_compile", False)),
        "run_eagerly": bool(getattr(model, "run_eagerly", False)),
        "steps_per_execution": int(getattr(model, "steps_per_execution", 1) or 1),
        "strategy": None,
        "replicas": 1,
        "forward_flops": None,
        "flops_coverage": None,
        "own_train_step": own_train_step(model),
    }
    try:
        from gpuscout.child.flops import count_with_coverage

        facts["forward_flops"], facts["flops_coverage"] = count_with_coverage(model)
    except Exception:
        pass
    facts["devices"] = devices_visible(facts["backend"])
    if facts["backend"] == "tensorflow":
        strategy = getattr(model, "distribute_strategy", None)
        if strategy is not None and type(strategy).__name__ != "_DefaultDistributionStrategy":
            facts["strategy"], facts["replicas"] = type(strategy).__name__, int(strategy.num_replicas_in_sync)
    else:
        distribution = keras.distribution.distribution()
        if distribution is not None:
            facts["strategy"] = type(distribution).__name__
            facts["replicas"] = (
                len(getattr(distribution.device_mesh, "devices", ()).flatten())
                if hasattr(getattr(distribution, "device_mesh", None), "devices")
                else 1
            )
    return facts


# Keras' callbacks that set the learning rate as a number each epoch (a schedule in its place stops them)
RATE_CALLBACKS = ("LearningRateScheduler", "ReduceLROnPlateau")


def sets_learning_rate(callback) -> bool:
    """The callback is (or derives from) one of Keras' that set the learning rate each epoch."""
    return any(k.__name__ in RATE_CALLBACKS and k.__module__.startswith("keras") for k in type(callback).__mro__)


def optimizer_facts(optimizer) -> dict:
    """The optimizer's class (a loss-scaling wrapper named with what it wraps) and its initial
    learning rate where that is a number: what a diverging loss's advice names. Read before fit
    starts: on jax, fit moves the variables' values into its own state while it runs."""
    if optimizer is None:
        return {"optimizer": None, "learning_rate": None}
    name = type(optimizer).__name__
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        name, optimizer = f"{name}({type(inner).__name__})", inner
    try:
        import numpy as np

        # a schedule's value at the current step (its first, where fit has just begun)
        rate = float(np.asarray(optimizer.learning_rate))
    except Exception:
        rate = None
    return {"optimizer": name, "learning_rate": rate}


def devices_visible(backend: str) -> int | None:
    """The devices this process's framework could train on: jax's default backend's (the GPUs it
    sees, else the CPU's, several with --xla_force_host_platform_device_count), TensorFlow's
    logical GPUs, else its logical CPUs. Against `replicas`, it says whether devices sat unused."""
    try:
        if backend == "jax":
            import jax

            return len(jax.devices())
        if backend == "tensorflow":
            import tensorflow as tf

            return len(tf.config.list_logical_devices("GPU")) or len(tf.config.list_logical_devices("CPU"))
    except Exception:
        return None
    return None


def peak_memory_bytes() -> int | None:
    """The framework allocator's peak on the GPUs this process used (None on the CPU)."""
    try:
        import keras

        if keras.backend.backend() == "jax":
            import jax

            peaks = [
                int(s["peak_bytes_in_use"])
                for d in jax.local_devices()
                if (s := d.memory_stats()) and "peak_bytes_in_use" in s
            ]
        else:
            import tensorflow as tf

            peaks = [
                int(tf.config.experimental.get_memory_info(d.name)["peak"])
                for d in tf.config.list_logical_devices("GPU")
            ]
        return max(peaks) if peaks else None
    except Exception:
        return None


def own_train_step(model) -> bool:
    """The model's class defines train_step itself (a GAN, a custom loss): a model wrapped around
    it would train with Keras' own step instead."""
    step = getattr(type(model), "train_step", None)
    module = getattr(step, "__module__", "") or ""
    return step is not None and not module.startswith("keras.")
