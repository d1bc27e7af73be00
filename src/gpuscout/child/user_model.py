"""A user's own model inside the measuring child (Keras imported): load it from its file, work out
its inputs, labels, loss and FLOPs, and (the inspection task) train one step on two samples.

The parent's side (parsing `--model`, the InputSpec users return, the parent's view of the
model) is gpuscout.workloads.user.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from gpuscout.core.spec import ModelInfo, ModelRef
from gpuscout.workloads.base import Workload
from gpuscout.workloads.user import INSPECT_BATCH, InputSpec, display_name


def load(ref: ModelRef, keras, policy: str):
    """(model, InputSpec) from the user's file; exceptions propagate with their traceback."""
    if ref.function is None:
        model = keras.saving.load_model(ref.path)
        given = _spec_of_saved(model, ref)
        free = any(d is None for d in model.inputs[0].shape[1:])
        if policy != "float32" or free:
            model = _rebuild(keras, model, policy, given if free else None)
        return model, given
    import importlib.util

    module_spec = importlib.util.spec_from_file_location(f"gpuscout_user_{Path(ref.path).stem}", ref.path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    build = getattr(module, ref.function, None)
    if not callable(build):
        raise ValueError(f"{Path(ref.path).name} has no function {ref.function}()")
    built = build()
    if isinstance(built, keras.Model):  # a bare model: its input says the shape, as a saved .keras file's does
        model, given = built, _spec_of_saved(built, ref)
    elif isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], keras.Model):
        model, given = built
        if isinstance(given, dict):
            given = InputSpec(**given)
        if not isinstance(given, InputSpec):
            raise ValueError(
                f"{ref.function}() returned {type(given).__name__} as its input spec: "
                "return gpuscout.InputSpec(...) or a dict of its fields"
            )
        given = InputSpec(**{**asdict(given), "shape": tuple(ref.input_shape or given.shape)})
    else:
        what = built[0] if isinstance(built, tuple) and built else built
        kind = "a Keras layer, not a model" if isinstance(what, keras.layers.Layer) else type(what).__name__
        raise ValueError(f"{ref.function}() must return a Keras model, or (model, InputSpec(...)); it returned {kind}")
    if len(model.inputs) == 1:
        saved = tuple(model.inputs[0].shape[1:])
        if len(saved) != len(given.shape) or any(s is not None and s != d for s, d in zip(saved, given.shape)):
            raise ValueError(f"the input shape {given.shape} does not match the model's input {saved}")
        if any(d is None for d in saved):
            # Input(shape=(None,)): every layer's shape known only on a concrete input, so the FLOP
            # count sees the convolutions (it missed them: 1,515x too few)
            model = _rebuild(keras, model, policy, given)
    return model, given


def _spec_of_saved(model, ref: ModelRef) -> InputSpec:
    if len(model.inputs) != 1:
        raise ValueError(
            f"the model has {len(model.inputs)} inputs; gpuscout benchmarks one-input models "
            "(wrap yours in a build() function that returns one)"
        )
    saved = tuple(model.inputs[0].shape[1:])
    shape = ref.input_shape
    if shape is None:
        free = [str(i + 1) for i, d in enumerate(saved) if d is None]
        if free:
            raise ValueError(
                f"the model's input shape {saved} leaves dimension{'s' if len(free) > 1 else ''} "
                f"{', '.join(free)} of a sample free: pass --input-shape (e.g. "
                f"{','.join('128' if d is None else str(d) for d in saved)}), or return "
                "(model, InputSpec(shape=...)) from build()"
            )
        shape = tuple(int(d) for d in saved)
    elif len(shape) != len(saved) or any(s is not None and s != d for s, d in zip(saved, shape)):
        raise ValueError(f"--input-shape {shape} does not match the model's input {saved}")
    dtype = str(model.inputs[0].dtype)
    return InputSpec(shape=shape, dtype=dtype)


def _rebuild(keras, model, policy: str, concrete: InputSpec | None):
    """The same model and weights with every layer under `policy`, and on a concrete input shape
    when the saved one has free dimensions (so that the FLOP count knows every layer's shape)."""

    def clone_layer(layer):
        return layer.__class__.from_config({**layer.get_config(), "dtype": policy})

    inputs = keras.Input(concrete.shape, dtype=concrete.dtype) if concrete is not None else None
    clone = keras.models.clone_model(model, input_tensors=inputs, clone_function=clone_layer)
    clone.set_weights(model.get_weights())
    if getattr(model, "compiled", False) and getattr(model, "loss", None) is not None:
        optimizer = getattr(model, "optimizer", None)
        clone.compile(
            optimizer=optimizer.__class__.from_config(optimizer.get_config()) if optimizer else "adam", loss=model.loss
        )
    return clone


def resolve(model, given: InputSpec, keras) -> tuple[Workload, ModelInfo]:
    """Work out labels, loss, optimizer and FLOPs; returns the child's workload and the info."""
    import numpy as np

    from gpuscout.child.flops import count_with_coverage

    output = model.compute_output_spec(keras.KerasTensor((INSPECT_BATCH, *given.shape), dtype=given.dtype))
    if isinstance(output, (list, tuple, dict)):
        raise ValueError("the model has several outputs; gpuscout benchmarks one-output models")
    out_shape = tuple(int(d) for d in output.shape[1:])
    compiled_loss = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
    loss = given.loss if given.loss is not None else compiled_loss
    last_activation = getattr(getattr(model.layers[-1], "activation", None), "__name__", "")
    if loss is None and last_activation == "sigmoid":  # a binary (or multi-label) classifier
        loss = "binary_crossentropy"
    kind = label_kind(loss)
    if kind in ("sparse", "onehot"):
        num_classes = given.num_classes or (out_shape[-1] if out_shape else None)
        if not num_classes or num_classes < 2:
            raise ValueError(
                f"the model's output {out_shape} has no class axis: give InputSpec(loss=...) "
                "for a regression, or num_classes"
            )
        label_shape = out_shape[:-1] if kind == "sparse" else out_shape
    else:
        num_classes, label_shape = given.num_classes, out_shape
    if loss is None:
        softmax = last_activation == "softmax"
        build_loss = lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=not softmax)  # noqa: E731
    else:
        build_loss = lambda k: loss  # noqa: E731
    integer = np.dtype(given.dtype).kind in "iu"
    vocab = given.vocab_size or (_embedding_size(model) if integer else None)
    if integer and not vocab:
        raise ValueError("integer inputs need InputSpec(vocab_size=...) (no Embedding layer to read it from)")
    if given.flops_per_sample is not None:
        flops, source, coverage = float(given.flops_per_sample), "given", None
    else:
        flops, coverage = count_with_coverage(model)
        source = "counted"
    info = ModelInfo(
        name="",
        input_shape=given.shape,
        input_dtype="int32" if integer else "float32",
        label_shape=label_shape,
        label_kind=kind,
        num_classes=num_classes,
        vocab_size=vocab,
        params=int(model.count_params()),
        compute_dtype=_main_compute_dtype(model),
        forward_flops=flops,
        flops_source=source,
        flops_coverage=coverage,
        default_batch_size=given.batch_size,
    )
    optimizer = model.optimizer if getattr(model, "optimizer", None) is not None else None
    workload = Workload(
        name="",
        description="user model",
        input_kind="ids" if integer else "vector",
        num_classes=num_classes or 1,
        default_batch_size=given.batch_size,
        reference_dataset_size=None,
        reference_dataset=None,
        unit="samples",
        build_model=lambda k, seq_len: model,
        build_optimizer=lambda k: optimizer or k.optimizers.Adam(learning_rate=1e-3),
        forward_flops=lambda seq_len: flops,
        fixed_input_shape=given.shape,
        label_shape=label_shape,
        label_kind=kind,
        vocab_size=vocab,
        loss=build_loss,
    )
    return workload, info


# The targets each built-in Keras loss expects (keras.io/api/losses), by the loss's name without
# underscores; anything else is a regression on float targets ("dense").
LABEL_KINDS = (
    ("sparsecategorical", "sparse"),  # class ids
    ("categoricalcrossentropy", "onehot"),
    ("categoricalfocalcrossentropy", "onehot"),
    ("categoricalhinge", "onehot"),  # one-hot class vectors
    ("binarycrossentropy", "binary"),
    ("binaryfocalcrossentropy", "binary"),
    ("squaredhinge", "binary"),
    ("hinge", "binary"),  # 0/1 targets (hinge losses map them to -1/+1)
    ("kldivergence", "distribution"),
    ("kld", "distribution"),
    ("kullbackleiblerdivergence", "distribution"),  # probability vectors
    ("poisson", "positive"),
    ("meansquaredlogarithmicerror", "positive"),
    ("msle", "positive"),
    ("meanabsolutepercentageerror", "positive"),
    ("mape", "positive"),  # counts, rates: never near 0 or below
)


def loss_name(loss) -> str:
    """A loss given by name, as an object or as a function, as its name in lower case without
    underscores: 'binary_crossentropy', BinaryCrossentropy() and keras.losses.binary_crossentropy
    all give 'binarycrossentropy'."""
    if isinstance(loss, str):
        name = loss
    else:
        name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__
    return name.lower().replace("_", "")


def label_kind(loss) -> str:
    """What targets `loss` trains on: sparse (no loss given: sparse cross-entropy), onehot, binary,
    distribution, positive, or dense (any other: float targets of the output's shape)."""
    if loss is None:
        return "sparse"
    name = loss_name(loss)
    for key, kind in LABEL_KINDS:
        if name == key or name.startswith(key) or (len(key) > 4 and key in name):
            return kind
    return "dense"


def _main_compute_dtype(model) -> str:
    layers = [layer for layer in model._flatten_layers(include_self=False) if layer.weights]
    if not layers:
        return str(model.compute_dtype)
    biggest = max(layers, key=lambda layer: sum(int(w.size) if hasattr(w, "size") else 0 for w in layer.weights))
    return str(biggest.compute_dtype)


def _embedding_size(model) -> int | None:
    for layer in model._flatten_layers(include_self=False):
        if type(layer).__name__ == "Embedding":
            return int(layer.input_dim)
    return None


def inspect(ref: ModelRef, keras, policy: str) -> ModelInfo:
    """The inspection child's work: load, resolve, one training step on two samples (CPU)."""
    from gpuscout.child import data

    model, given = load(ref, keras, policy)
    workload, info = resolve(model, given, keras)
    model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras))
    x, y = data.synthetic_batches(workload, INSPECT_BATCH, seed=0)[0]
    model.train_on_batch(x, y)  # raises with the user's traceback when the model cannot train
    return info.model_copy(update={"name": display_name(ref)})
