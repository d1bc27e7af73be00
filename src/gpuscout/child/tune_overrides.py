"""Inside a script run by `gpuscout tune -- COMMAND`: one change applied to the unchanged script.

gpuscout passes the change in GPUSCOUT_TUNE (core/tune_settings.py's TuneSettings, as JSON)
beside watch's own settings; the watch hook
(child/watch_hook.py) calls these functions where Keras gives them a place, before the first
layer is built (the precision policy), at `Model.compile` (XLA, steps_per_execution) and at
`Model.fit` (the input, the batch). Nothing in a file changes. What was applied goes to the
parent as a `watch_applied` event, so the record says what really ran; a change that finds
nothing to apply to (no PyDataset for workers) says so instead.

Only the standard library, Keras and the frameworks are imported here, and those lazily.
"""

from __future__ import annotations

import os

from gpuscout.child.watch_state import emit, is_pydataset
from gpuscout.core.tune_settings import TuneSettings

# What this run applies (core/tune_settings.py: typed, checked where the parent encoded it); a test
# may set another
SETTINGS = TuneSettings.from_env(os.environ)
_said: set[str] = set()


def applied(name: str, detail: str) -> None:
    """Tell the parent once per change what was applied, where."""
    if name not in _said:
        _said.add(name)
        emit("watch_applied", change=name, detail=detail)


def on_keras(keras_module_loaded) -> None:
    """Keras' model module has just been executed: no layer exists yet."""
    policy = SETTINGS.mixed_precision
    if policy:
        # keras' top-level package is still being imported here: its own module, not keras.mixed_precision
        from keras.src.dtype_policies.dtype_policy import set_dtype_policy

        set_dtype_policy(policy)
        applied("mixed_precision", f"keras.mixed_precision.set_global_policy({policy!r}) before the first layer")
        _keep_policy(policy)
    if SETTINGS.data_parallel:
        data_parallel()


def _keep_policy(policy: str) -> None:
    """The script's own float32 policy, set after Keras' import (a script left in debugging settings
    calls set_global_policy('float32'); keras.backend.clear_session() resets it), replaced with
    tune's: every path that sets the policy goes through Keras' global state (issue 60: on an H100
    the script's call undid the change, and mixed precision measured 0.98x on top of a batch of
    2,048 where the fix by hand ran 1.8x)."""
    from keras.src.backend.common import global_state
    from keras.src.dtype_policies.dtype_policy import DTypePolicy

    original = global_state.set_global_attribute

    def set_global_attribute(name, value):
        if name == "dtype_policy" and getattr(value, "name", None) == "float32":
            value = DTypePolicy(policy)
            applied("mixed_precision (kept)", f"the script's float32 policy replaced with {policy!r}")
        return original(name, value)

    global_state.set_global_attribute = set_global_attribute


def data_parallel() -> None:
    """The step on every device, each batch split across them: jax, Keras' DataParallel set before
    the first layer (what keras.distribution.set_distribution(DataParallel()) does in a script);
    TensorFlow, a MirroredStrategy made the process's default strategy when the first layer is
    made (as if the script built its model in the strategy's scope). The instrumentation's model
    facts then count the replicas."""
    # keras' top-level package is still being imported here (on_keras): its own modules
    from keras.src.backend import backend

    if backend() == "tensorflow":
        _mirrored_at_first_layer()
        return
    from keras.src.distribution.distribution_lib import DataParallel, set_distribution

    distribution = DataParallel()
    set_distribution(distribution)
    devices = len(distribution.device_mesh.devices.flatten())
    applied(
        "data_parallel",
        f"keras.distribution.set_distribution(keras.distribution.DataParallel()) before the "
        f"first layer: {devices} devices",
    )


def _mirrored_at_first_layer() -> None:
    """Not at import: making a strategy fixes TensorFlow's devices, and a script's own
    tf.config calls (memory growth, logical devices), which must come before that, would then
    fail. Every layer's construction passes Layer.__init__ (a subclass's super().__init__ too);
    the first one sets the strategy and puts Keras' own __init__ back."""
    from keras.src.layers.layer import Layer

    keras_init = Layer.__init__

    def first_layer(self, *args, **kwargs):
        Layer.__init__ = keras_init
        import tensorflow as tf

        # MirroredStrategy() takes every GPU, or one CPU without a GPU: the logical CPUs are named
        # so that a CPU split into devices (the tests) is spread over as GPUs would be
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
        tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy(devices))
        applied(
            "data_parallel",
            "tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy()) when "
            f"the first layer was made: {len(devices)} devices",
        )
        keras_init(self, *args, **kwargs)

    Layer.__init__ = first_layer


def compile_kwargs(kwargs: dict) -> dict:
    if SETTINGS.run_eagerly is False:  # before jit: Keras turns XLA off under run_eagerly=True
        kwargs["run_eagerly"] = False
    if SETTINGS.jit_compile:
        kwargs["jit_compile"] = True
        applied("jit_compile", "model.compile(..., jit_compile=True)")
    spe = SETTINGS.steps_per_execution
    if spe:
        kwargs["steps_per_execution"] = int(spe)
        applied("steps_per_execution", f"model.compile(..., steps_per_execution={int(spe)})")
    return kwargs


def fit_input(args: tuple, kwargs: dict, model=None) -> tuple[tuple, dict]:
    """The input fit reads, changed as asked: a PyDataset's workers, a tf.data dataset's prefetch,
    a generator drained by a prefetching thread, the batch size of in-memory arrays (and the
    model's learning rate scaled for it)."""
    x = args[0] if args else kwargs.get("x")
    kind = type(x)
    changed = x
    if SETTINGS.run_eagerly is False and model is not None:
        compiled_step(model)
    workers = SETTINGS.workers
    if workers and is_pydataset(x):
        processes = bool(SETTINGS.processes)
        x._workers, x._use_multiprocessing = int(workers), processes  # PyDataset reads these at fit
        x._max_queue_size = 2 * int(workers)  # as the patch writes it
        applied("workers", f"PyDataset(workers={int(workers)}, use_multiprocessing={processes})")
    moved = SETTINGS.augment_in_model
    if moved and is_pydataset(x) and id(model) in _compiled_with:
        from gpuscout.child.sample_work import move_into_model

        where = move_into_model(x, moved)
        _augmenting[id(model)] = None
        applied(
            "augment_in_model",
            f"{where} returns its {moved['argument']} as given; the model behind "
            + ", ".join(layer["name"] for layer in moved["layers"]),
        )
    if SETTINGS.cache:
        changed = cached(x)
    if SETTINGS.prefetch and kind.__module__.startswith("tensorflow") and hasattr(x, "prefetch"):
        from gpuscout.child.fixes import tuned_pipeline

        changed = tuned_pipeline(x)
        applied("prefetch", "fit(tuned_pipeline(dataset), ...): autotuned, parallel maps in order, prefetched")
    if SETTINGS.prefetch and (hasattr(changed, "__next__") and not hasattr(changed, "element_spec")):
        from gpuscout.child.fixes import read_ahead

        changed = read_ahead(changed, SETTINGS.prefetch_depth)
        applied("prefetch", "the generator read 8 batches ahead by a background thread (read_ahead)")
    batch = SETTINGS.batch_size
    if batch:  # before device_batches, which cuts the arrays at fit's batch
        kwargs["batch_size"] = int(batch)
        applied("batch_size", f"model.fit(..., batch_size={int(batch)})")
        scale_learning_rate(model, kwargs.get("callbacks"))
    if SETTINGS.device_batches:
        args, kwargs = device_batches(args, kwargs)
    if changed is not x:
        if args:
            args = (changed, *args[1:])
        else:
            kwargs["x"] = changed
    return args, kwargs


# By id(model), not on the model: an attribute of a Keras model is tracked, and a wrapper kept on
# the model it wraps makes each the other's layer (building it then recursed without end)
_compiled_with: dict[int, tuple] = {}  # compile's arguments
_augmenting: dict[int, object] = {}  # the model that wraps it behind the layers (None until made)


def remember_compile(model, args: tuple, kwargs: dict) -> None:
    """compile's arguments, kept where the model is trained behind augmentation layers: the
    model that wraps it is compiled with them (the same optimizer, loss and metrics objects)."""
    if SETTINGS.augment_in_model:
        _compiled_with[id(model)] = (args, dict(kwargs))


def augments(model) -> bool:
    """fit trains `model` behind the layers that do the PyDataset's augmentation."""
    return id(model) in _augmenting or any(w is model for w in _augmenting.values())


def model_for_fit(model):
    """The model fit trains: the script's own, or, where the PyDataset's augmentation was moved
    (fit_input), keras.Sequential([Input, *layers, model]) compiled as the script compiled its
    model: what the patch writes before the script's compile. Made once per model."""
    if id(model) not in _augmenting:
        return model
    if _augmenting[id(model)] is None:
        import keras

        moved = SETTINGS.augment_in_model
        from gpuscout.child import fixes

        layers = [
            (getattr(keras.layers, layer["name"], None) or getattr(fixes, layer["name"]))(
                *layer["args"], **layer["kwargs"]
            )
            for layer in moved["layers"]
        ]
        wrapper = keras.Sequential(
            [keras.Input(shape=tuple(moved["input_shape"])), *layers, model], name=f"{model.name}_augmenting"
        )
        args, kwargs = _compiled_with[id(model)]
        wrapper.compile(*args, **kwargs)
        wrapper.run_eagerly = model.run_eagerly  # a debugging setting made after compile stays the script's
        wrapper._gpuscout_compiled_at = getattr(model, "_gpuscout_compiled_at", None)
        _augmenting[id(model)] = wrapper
    return _augmenting[id(model)]


def compiled_step(model) -> None:
    """The step compiled whatever the script set after compile (`model.run_eagerly = True`, its
    debugging line): run_eagerly off, and XLA on where the change asks (Keras turned it off
    at compile when run_eagerly was on)."""
    model.run_eagerly = False
    if SETTINGS.jit_compile:
        model.jit_compile = True
    applied(
        "jit_compile",
        "model.compile(..., run_eagerly=False" + (", jit_compile=True)" if SETTINGS.jit_compile else ")"),
    )


def scale_learning_rate(model, callbacks) -> None:
    """The learning rate scaled for the larger batch, warmed up to it (fixes.scaled_learning_rate):
    what the change's line tells the user to write, measured with it. Beside a callback that sets
    the rate itself, scaled once, without the warm-up (the callback's own values then rule)."""
    factor = SETTINGS.learning_rate_factor
    optimizer = getattr(model, "optimizer", None)
    if not factor or optimizer is None:
        return
    from gpuscout.child.fixes import scaled_learning_rate
    from gpuscout.child.model_facts import sets_learning_rate

    setter = next(
        (
            type(c).__name__
            for c in (callbacks if isinstance(callbacks, (list, tuple)) else ())
            if sets_learning_rate(c)
        ),
        None,
    )  # a schedule in its place would stop it (TypeError)
    warmup = 0 if setter else 1 if SETTINGS.warmup_steps is None else SETTINGS.warmup_steps
    scaled_learning_rate(optimizer, float(factor), warmup)
    applied(
        "learning_rate",
        f"scaled_learning_rate(model.optimizer, {float(factor):g}, warmup_steps={warmup})"
        + (f": no warm-up beside the script's {setter}, which sets the rate itself" if setter else ""),
    )


def cached(x):
    """The input kept after its first epoch (a PyDataset) or period (a generator), as the baseline
    found them to repeat: the same code the patch writes (child/fixes.py)."""
    from gpuscout.child import fixes

    if is_pydataset(x):
        applied("cache", "fit(CachedBatches(dataset), ...): each batch kept after it is first made")
        return fixes.CachedBatches(x)
    period = SETTINGS.period
    if period and hasattr(x, "__next__") and not hasattr(x, "element_spec"):
        applied("cache", f"fit(replayed(batches, period={int(period)}), ...): the stream kept after its first period")
        return fixes.replayed(x, int(period))
    return x


def device_batches(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """In-memory arrays given to fit on jax handed to it as device slices (fixes.device_slices;
    keras' array_slicing otherwise gathers each batch on the host: on an H100 a ResNet-50 fed that
    way ran 1.62x slower, docs/benchmarks.md): the same batches in the same order, fit's shuffle
    kept, so the same training (tune/same_training.py checks it). Left alone where fit weighs its
    samples or splits off its own validation, which the slices would not do."""
    import keras

    x = args[0] if args else kwargs.get("x")
    y = args[1] if len(args) > 1 else kwargs.get("y")
    if (
        keras.backend.backend() != "jax"
        or y is None
        or len(args) > 2
        or kwargs.get("validation_split")
        or kwargs.get("sample_weight") is not None
        or kwargs.get("class_weight") is not None
        or not hasattr(x, "shape")
        or not hasattr(y, "shape")
    ):
        return args, kwargs
    from gpuscout.child.fixes import device_slices

    batch = int(kwargs.get("batch_size") or 32)
    shuffle = kwargs.get("shuffle", True)
    steps = -(-len(x) // batch)  # fit's own count: the last batch partial
    kwargs = {k: v for k, v in kwargs.items() if k not in ("x", "y", "batch_size", "shuffle")}
    kwargs.setdefault("steps_per_epoch", steps)
    if kwargs.get("validation_data") is not None:  # validated at fit's batch, as before (its default: batch_size)
        kwargs.setdefault("validation_batch_size", batch)
    applied(
        "device_batches",
        f"fit(device_slices(x, y, {batch}, shuffle={shuffle!r}), steps_per_epoch={steps}"
        + (f", validation_batch_size={kwargs['validation_batch_size']}" if "validation_batch_size" in kwargs else "")
        + "): the arrays put on the device once, each batch sliced there",
    )
    return (device_slices(x, y, batch, shuffle),), kwargs
