"""The fixes for mistakes in the training script itself (issue 78): labels and losses, input
shapes, data types, saving and loading in Keras 3, optimizers, traced values under jax, forking
after jax. Each names the line of the user's code the traceback points at (`site`, read by
explain/reader.py) and writes the change for the framework that ran it (`name`: tensorflow or jax).
Same signature as remedies.py's: (facts, machine, context, framework) -> the fix."""

from __future__ import annotations

import difflib
import os
import re

from gpuscout.explain.machine import Context, Machine

# Keras 3's own names for what compile and layers take as strings (keras/src/losses, metrics,
# optimizers, activations __init__.py, 3.15): what a misspelt identifier is matched against
KNOWN_NAMES = {
    "loss": (
        "binary_crossentropy binary_focal_crossentropy categorical_crossentropy categorical_focal_crossentropy "
        "categorical_hinge cosine_similarity ctc dice hinge huber kl_divergence log_cosh mean_absolute_error "
        "mean_absolute_percentage_error mean_squared_error mean_squared_logarithmic_error poisson "
        "sparse_categorical_crossentropy squared_hinge tversky mse mae mape msle"
    ),
    "metric": (
        "accuracy binary_accuracy categorical_accuracy sparse_categorical_accuracy top_k_categorical_accuracy "
        "sparse_top_k_categorical_accuracy auc precision recall mean_squared_error mean_absolute_error "
        "root_mean_squared_error mse mae mape msle binary_crossentropy categorical_crossentropy "
        "sparse_categorical_crossentropy"
    ),
    "optimizer": "adadelta adafactor adagrad adam adamw adamax ftrl lamb lion loss_scale_optimizer nadam rmsprop sgd",
    "activation": (
        "celu elu exponential gelu glu hard_sigmoid hard_silu hard_swish leaky_relu linear log_sigmoid log_softmax "
        "mish relu relu6 selu sigmoid silu softmax softplus softsign sparse_plus sparsemax squareplus swish tanh "
        "tanh_shrink threshold"
    ),
}


def at_site(facts: dict) -> str:
    """Where in the user's own code the traceback points ("train.py:46, `model.fit(x, y)`: "), or ""."""
    site = facts.get("site")
    return f"at {site}: " if site else ""


def _shape(text: str | None) -> list[int | None]:
    """(32, 10) or [32,10] as numbers, None for a dimension not known."""
    return [None if p.strip() in ("None", "?", "") else int(p) for p in re.findall(r"None|\?|\d+", text or "")]


def loss_and_labels(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    target, output = _shape(facts.get("target")), _shape(facts.get("output"))
    classes = output[-1] if output else None
    many = f", {classes}" if classes else ""
    if len(target) < len(output):  # one class index a sample into a one-hot loss
        return (
            f"{at_site(facts)}compile with loss='sparse_categorical_crossentropy' (labels as class indices, "
            f"as they are), or one-hot the labels for this loss: y = keras.utils.to_categorical(y{many}); "
            "the accuracy metric then follows the loss"
        )
    return (
        f"{at_site(facts)}compile with loss='categorical_crossentropy' (labels one-hot, as they are), or turn "
        "them into class indices for the sparse loss: y = y.argmax(axis=-1)"
    )


def label_out_of_range(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    label, classes = int(facts.get("label", 0)), int(facts.get("classes", 0))
    if label < 0:
        fix = f"a label of {label} is a marker, not a class (padding, 'unknown'): drop those samples, or mask them"
    elif label == classes:
        fix = (
            f"labels 1 to {classes} (1-based) need y - 1; or there are {classes + 1} classes and the last Dense "
            f"needs {classes + 1} units"
        )
    else:
        fix = f"the last Dense layer needs as many units as there are classes (at least {label + 1}), or relabel"
    gpu = " On a GPU this goes unchecked and shows as a NaN loss." if name == "tensorflow" or name is None else ""
    return f"{at_site(facts)}{fix}: labels run from 0 to the number of classes - 1.{gpu}"


def input_shape(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    expected = _shape(facts.get("expected") or facts.get("expected2"))
    got = _shape(facts.get("got"))
    head = at_site(facts)
    if expected and got and len(got) == len(expected) + 1 and expected[-1] is not None:
        sample = 1
        for d in got[1:]:
            sample *= d or 1
        if sample == expected[-1]:
            return (
                f"{head}each sample is {tuple(got[1:])} and the model takes {expected[-1]} values: flatten it in "
                f"the model (keras.layers.Flatten() after keras.Input(shape={tuple(got[1:])})), or "
                f"x = x.reshape(len(x), {expected[-1]})"
            )
    if expected and got and len(got) == len(expected) - 1:
        return (
            f"{head}the model wants one more axis (channels: {tuple(expected[1:])}): "
            "x = np.expand_dims(x, -1), or keras.Input(shape=...) without it"
        )
    if expected and got and len(got) == len(expected) and got[1:] != expected[1:]:
        return (
            f"{head}the model's keras.Input(shape={tuple(expected[1:])}) and the data's {tuple(got[1:])} "
            "disagree: build the model with the data's shape (keras.Input(shape=x.shape[1:])), or resize the data"
        )
    return (
        f"{head}give the model batches of the shape it was built for (print x.shape beside model.input_shape); "
        "a single sample needs its batch axis: model.predict(x[None])"
    )


def data_cardinality(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}give x and y the same samples: they were split or filtered apart (x_train with y_test, "
        "rows dropped from one side, a validation split taken from one), as the sizes on the next lines show; "
        "assert len(x) == len(y) where they are made"
    )


def object_array(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}convert the data to numbers first: x = np.asarray(x).astype('float32') (a pandas frame: "
        "df.astype('float32'), with text columns encoded first: pd.get_dummies or keras.layers.StringLookup); "
        "sequences of different lengths: keras.utils.pad_sequences(x)"
    )


def ran_out_of_data(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}leave steps_per_epoch out where fit can count the data (a tf.data dataset, a PyDataset, "
        "arrays), or make a generator endless (a while True loop) or the dataset repeat (dataset.repeat()), "
        "with steps_per_epoch = samples // batch_size; the epochs after this warning did not train"
    )


def unknown_identifier(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    what, given = facts.get("what", "loss"), facts.get("name", "")
    known = KNOWN_NAMES.get(what, "").split()
    close = difflib.get_close_matches(given.lower(), known, n=1, cutoff=0.6)
    suggestion = (
        f"'{close[0]}'"
        if close
        else f"as Keras names its {what}es"
        if what == "loss"
        else f"as Keras names its {what}s"
    )
    example = {"loss": "keras.losses.SparseCategoricalCrossentropy()", "optimizer": "keras.optimizers.Adam(1e-3)"}
    instead = f", or pass the object itself ({example[what]})" if what in example else ""
    return f"{at_site(facts)}spell it {suggestion}{instead}"


def not_compiled(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}call model.compile(optimizer='adam', loss=..., metrics=[...]) before fit or evaluate "
        "(a model loaded with compile=False, or rebuilt, needs it again)"
    )


def save_path_extension(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    path = (facts.get("path") or "model").rstrip(".")
    stem = os.path.splitext(path)[0] if path.endswith((".h5", ".hdf5", ".tf")) else path
    return (
        f"{at_site(facts)}save to {stem}.keras (model.save('{stem}.keras'); ModelCheckpoint(filepath='{stem}.keras') "
        f"or save_weights_only=True with '{os.path.basename(stem)}.weights.h5'); for a SavedModel to serve: "
        f"model.export('{stem}')"
    )


def load_saved_model_folder(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    path = facts.get("path", "PATH")
    return (
        f"{at_site(facts)}a SavedModel folder loads in Keras 3 only for inference: "
        f"keras.layers.TFSMLayer('{path}', call_endpoint='serving_default'); to train it again, load it once with "
        "Keras 2 (pip install tf_keras; TF_USE_LEGACY_KERAS=1) and save it as model.save('model.keras')"
    )


def custom_object_unknown(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    cls = facts.get("name", "MyLayer")
    return (
        f"{at_site(facts)}decorate {cls} with @keras.saving.register_keras_serializable() and import the module "
        f"that defines it before loading; or load_model(path, custom_objects={{'{cls}': {cls}}}). A class with "
        "constructor arguments also needs get_config() returning them"
    )


def optimizer_reused(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}give each model (and each rebuilt model, a new fold or trial) its own optimizer: "
        "model.compile(optimizer=keras.optimizers.Adam(learning_rate=...)) made inside the loop, or the "
        "string 'adam', which makes a new one each compile"
    )


def model_not_built(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}build it first: start the model with keras.Input(shape=...), or call it once on a "
        "batch (model(x[:1])), or model.build((None, *x.shape[1:])), then summary() or count_params()"
    )


def keras_tensor_in_tf_function(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    jax = " (the jax backend runs no TensorFlow op in a model at all)" if name == "jax" else ""
    return (
        f"{at_site(facts)}use keras.ops where the model is built (keras.ops.sum for tf.reduce_sum, keras.ops.reshape "
        f"for tf.reshape){jax}, or put the TensorFlow call in a layer's call(): class MyOp(keras.layers.Layer): "
        "def call(self, x): return tf_fn(x)"
    )


def jax_tracer_value(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}write the branch with array ops the step can compile: keras.ops.where(cond, a, b) "
        "for an if on values, keras.ops.cond for one of two computations, a Python loop only over a fixed "
        "count; to find the line, compile(..., run_eagerly=True) runs the step op by op (slowly) with a "
        "plain Python traceback"
    )


def fork_after_jax(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}never fork a process that has started JAX: keep PyDataset(workers=N, "
        "use_multiprocessing=False) (threads), or make workers from a new interpreter "
        "(multiprocessing.get_context('spawn')); `gpuscout tune` measures both on this script and writes "
        "worker processes of their own (process_workers) where threads are held by the GIL"
    )


def graph_execution_error(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}read the message at the end of the traceback (the op after 'Detected at node' names "
        "the layer or loss): most are a label or a shape the data does not match; to get a plain Python "
        "traceback at your line, compile(..., run_eagerly=True) for one run"
    )


def xla_unsupported_op(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    op = facts.get("op", "the op")
    return (
        f"{at_site(facts)}compile without XLA (model.compile(..., jit_compile=False), or 'auto', Keras' default, "
        f"which turns it off where it cannot compile), or write what {op} does with TensorFlow or keras.ops "
        "operations; a Python function belongs in the input pipeline (dataset.map), not the model"
    )


def pydataset_super_not_called(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        "begin the PyDataset's __init__ with super().__init__(**kwargs) and give it workers=N (threads; "
        "use_multiprocessing=True for processes, not under jax) and max_queue_size there: fit(workers=...) "
        "does nothing in Keras 3"
    )


def labels_missing(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"{at_site(facts)}make the input yield (inputs, labels): a PyDataset's __getitem__ and a generator "
        "return a tuple x, y (and a weight); a dataset of inputs alone trains only a model compiled without "
        "a loss, or one whose train_step computes it"
    )


def cuda_init_failed(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    seen = machine.env.get("CUDA_VISIBLE_DEVICES")
    visible = f"CUDA_VISIBLE_DEVICES is {seen!r} here: unset it or name a GPU that exists; " if seen is not None else ""
    gpus = f"NVML sees {len(machine.gpus)} GPU(s) on this machine, so the driver is up: " if machine.gpus else ""
    return (
        f"{gpus}{visible}check nvidia-smi; in a container start it with the GPUs (docker run --gpus all); "
        "CUDA_ERROR_NO_DEVICE with a GPU present is often CUDA_VISIBLE_DEVICES set to an index that does "
        "not exist, and UNKNOWN ERROR (303) a driver module not loaded (reboot after a driver upgrade)"
    )


def tensorrt_not_found(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        "nothing to fix for training: the line is a warning TensorFlow prints at import; hide TensorFlow's "
        "warnings with TF_CPP_MIN_LOG_LEVEL=2, and look at the lines after it for the real failure"
    )


FIXERS = (
    loss_and_labels,
    label_out_of_range,
    input_shape,
    data_cardinality,
    object_array,
    ran_out_of_data,
    unknown_identifier,
    not_compiled,
    save_path_extension,
    load_saved_model_folder,
    custom_object_unknown,
    optimizer_reused,
    model_not_built,
    keras_tensor_in_tf_function,
    jax_tracer_value,
    fork_after_jax,
    graph_execution_error,
    xla_unsupported_op,
    pydataset_super_not_called,
    labels_missing,
    cuda_init_failed,
    tensorrt_not_found,
)
