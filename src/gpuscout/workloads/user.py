"""A user's own model as a workload: `--model file.py:build` or `--model model.keras`.

`build()` returns the model and what its input is::

    from gpuscout import InputSpec

    def build():
        inputs = keras.Input((32, 32, 3))
        ...
        return keras.Model(inputs, logits), InputSpec(shape=(32, 32, 3), num_classes=10)

(a dict with the same keys works too, so the file need not import gpuscout). The model may be
compiled: its optimizer and loss are then used; otherwise Adam (learning rate 1e-3) and sparse
categorical cross-entropy (on logits, unless the last layer applies a softmax). `build()` runs in
the child after the precision policy is set, so mixed precision applies to the layers it creates.
A saved `.keras` model is loaded (with its compiled optimizer and loss when it was saved
compiled); under a mixed precision, or when `--input-shape` fills in free input dimensions, it is
cloned layer by layer (with that policy, on that shape) and given back its weights.

Before any measurement, an inspection child loads the model on the CPU, works out its inputs and
labels, counts its FLOPs and runs one training step on two samples: a mistake in the user's file
then stops the command with the file's traceback (exit 2) instead of failing on the GPU.

FLOPs per sample: the user's `flops_per_sample` (forward, 2 FLOPs per multiply-add) when given;
otherwise counted from the layers (workloads/flops.py: convolutions, dense and einsum-dense
layers, the attention products of Keras' MultiHeadAttention and of gpuscout's attention). The
count is exact for models made of those layers; elementwise work and layers it does not know are
left out, so the record states the share of the weights that sit in counted layers.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuscout.errors import UsageError, UserCodeError
from gpuscout.spec import ModelInfo, ModelRef
from gpuscout.workloads.base import Workload

DEFAULT_BATCH_SIZE = 32
INSPECT_BATCH = 2


@dataclass(frozen=True)
class InputSpec:
    """What a user's `build()` returns next to the model."""

    shape: tuple[int, ...]  # one sample, without the batch axis
    dtype: str = "float32"  # integer dtypes: ids drawn below vocab_size
    num_classes: int | None = None  # sparse labels below this; None: the output's last axis
    loss: Any = None  # a Keras loss (object or name); None: the compiled loss or sparse cross-entropy
    vocab_size: int | None = None  # integer inputs: the id range (default: num_classes)
    flops_per_sample: float | None = None  # forward FLOPs per sample; None: counted from the layers
    batch_size: int = DEFAULT_BATCH_SIZE  # the default batch for this model


# ---------------------------------------------------------------- parent side (no Keras)

def parse_ref(text: str, input_shape: str | None = None) -> ModelRef:
    """`path.py[:function]` or `path.keras`, checked before anything runs."""
    path_text, _, function = text.partition(":") if not Path(text).exists() else (text, "", "")
    path = Path(path_text).expanduser()
    if path.suffix not in (".py", ".keras"):
        raise UsageError(f"--model {text!r}: give a Python file and its function (model.py:build) "
                         "or a saved Keras model (model.keras)")
    if not path.is_file():
        raise UsageError(f"--model file not found: {path}")
    if path.suffix == ".keras" and function:
        raise UsageError(f"--model {text!r}: a .keras file has no function to name; drop ':{function}'")
    if path.suffix == ".py" and function and not function.isidentifier():
        raise UsageError(f"--model {text!r}: {function!r} is not a Python function name")
    shape = parse_shape(input_shape) if input_shape else None
    if shape is not None and path.suffix == ".py":
        raise UsageError("--input-shape is for .keras models; a build() function returns its InputSpec")
    return ModelRef(path=str(path.resolve()), function=(function or "build") if path.suffix == ".py" else None,
                    sha256=hashlib.sha256(path.read_bytes()).hexdigest(), input_shape=shape)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise UsageError(f"--input-shape must be positive whole numbers per sample, like 32,32,3; got {text!r}")
    return shape


def display_name(ref: ModelRef) -> str:
    name = Path(ref.path).name
    return f"{name}:{ref.function}" if ref.function else name


def workload_from_info(info: ModelInfo) -> Workload:
    """The parent's view of a user model: enough for records, FLOPs and batch data."""
    return Workload(
        name=info.name, description=f"user model ({info.params:,} parameters)",
        input_kind="ids" if info.input_dtype.startswith("int") else "vector",
        num_classes=info.num_classes or 1, default_batch_size=info.default_batch_size,
        reference_dataset_size=None, reference_dataset=None, unit="samples",
        build_model=_not_in_parent, build_optimizer=_not_in_parent,
        forward_flops=lambda seq_len: info.forward_flops, fixed_input_shape=info.input_shape,
        label_shape=info.label_shape, label_kind=info.label_kind, vocab_size=info.vocab_size,
    )


def inspect_in_child(ref: ModelRef, backend, precision, flops_per_sample: float | None = None,
                     timeout_s: float = 600.0) -> ModelInfo:
    """Run the inspection child (on the CPU): the model's description, or the user's traceback
    as a UserCodeError (exit 2)."""
    from gpuscout.executor.local import run_child
    from gpuscout.spec import Task, build_spec

    spec = build_spec(workload=display_name(ref), backend=backend, precision=precision, batch_size=INSPECT_BATCH,
                      task=Task.inspect, model=ref, gpu_index=None)
    outcome = run_child(spec, timeout_s=timeout_s)
    if outcome.status != "ok":
        raise UserCodeError(f"{display_name(ref)}: {outcome.message} (the model could not be built and "
                            "trained for one step on the CPU; the traceback is above)", _traceback(outcome.stderr_tail))
    info = ModelInfo(**{k: v for k, v in outcome.result["info"].items() if k in ModelInfo.model_fields})
    if flops_per_sample is not None:
        info = info.model_copy(update={"forward_flops": float(flops_per_sample), "flops_source": "given",
                                       "flops_coverage": None})
    return info


def _traceback(stderr: str) -> str:
    """The last Python traceback in a child's stderr, without the frameworks' log lines before it."""
    start = stderr.rfind("Traceback (most recent call last):")
    return stderr[start:] if start >= 0 else stderr


def _not_in_parent(*args):
    raise RuntimeError("a user model is built in the child process only")


# ---------------------------------------------------------------- child side (Keras imported)

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
    if not (isinstance(built, tuple) and len(built) == 2):
        raise ValueError(f"{ref.function}() must return (model, InputSpec(...)), got {type(built).__name__}")
    model, given = built
    if isinstance(given, dict):
        given = InputSpec(**given)
    if not isinstance(given, InputSpec):
        raise ValueError(f"{ref.function}() returned {type(given).__name__} as its input spec: "
                         "return gpuscout.InputSpec(...) or a dict of its fields")
    return model, InputSpec(**{**asdict(given), "shape": tuple(given.shape)})


def _spec_of_saved(model, ref: ModelRef) -> InputSpec:
    if len(model.inputs) != 1:
        raise ValueError(f"the model has {len(model.inputs)} inputs; gpuscout benchmarks one-input models "
                         "(wrap yours in a build() function that returns one)")
    saved = tuple(model.inputs[0].shape[1:])
    shape = ref.input_shape
    if shape is None:
        if any(d is None for d in saved):
            raise ValueError(f"the model's input shape {saved} has free dimensions: pass --input-shape")
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
        clone.compile(optimizer=optimizer.__class__.from_config(optimizer.get_config()) if optimizer else "adam",
                      loss=model.loss)
    return clone


def resolve(model, given: InputSpec, keras) -> tuple[Workload, ModelInfo]:
    """Work out labels, loss, optimizer and FLOPs; returns the child's workload and the info."""
    import numpy as np

    from gpuscout.workloads.flops import count_with_coverage

    output = model.compute_output_spec(keras.KerasTensor((INSPECT_BATCH, *given.shape), dtype=given.dtype))
    if isinstance(output, (list, tuple, dict)):
        raise ValueError("the model has several outputs; gpuscout benchmarks one-output models")
    out_shape = tuple(int(d) for d in output.shape[1:])
    compiled_loss = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
    loss = given.loss if given.loss is not None else compiled_loss
    kind = _label_kind(loss)
    if kind in ("sparse", "onehot"):
        num_classes = given.num_classes or (out_shape[-1] if out_shape else None)
        if not num_classes or num_classes < 2:
            raise ValueError(f"the model's output {out_shape} has no class axis: give InputSpec(loss=...) "
                             "for a regression, or num_classes")
        label_shape = out_shape[:-1] if kind == "sparse" else out_shape
    else:
        num_classes, label_shape = given.num_classes, out_shape
    if loss is None:
        last = model.layers[-1]
        softmax = getattr(getattr(last, "activation", None), "__name__", "") == "softmax"
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
        name="", input_shape=given.shape, input_dtype="int32" if integer else "float32",
        label_shape=label_shape, label_kind=kind, num_classes=num_classes,
        vocab_size=vocab, params=int(model.count_params()), compute_dtype=_main_compute_dtype(model),
        forward_flops=flops, flops_source=source,
        flops_coverage=coverage, default_batch_size=given.batch_size)
    optimizer = model.optimizer if getattr(model, "optimizer", None) is not None else None
    workload = Workload(
        name="", description="user model", input_kind="ids" if integer else "vector",
        num_classes=num_classes or 1, default_batch_size=given.batch_size, reference_dataset_size=None,
        reference_dataset=None, unit="samples", build_model=lambda k, seq_len: model,
        build_optimizer=lambda k: optimizer or k.optimizers.Adam(learning_rate=1e-3),
        forward_flops=lambda seq_len: flops, fixed_input_shape=given.shape, label_shape=label_shape,
        label_kind=kind, vocab_size=vocab, loss=build_loss)
    return workload, info


def _label_kind(loss) -> str:
    """sparse: class ids (no loss given, or a sparse cross-entropy); onehot: a categorical
    cross-entropy; dense: any other loss (regression targets of the output's shape)."""
    if loss is None:
        return "sparse"
    name = (loss if isinstance(loss, str) else getattr(loss, "name", None) or type(loss).__name__)
    name = name.lower().replace("_", "")
    if "sparsecategorical" in name:
        return "sparse"
    if "categoricalcrossentropy" in name:
        return "onehot"
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


def inspect(ref: ModelRef, keras, policy: str) -> dict:
    """The inspection child's work: load, resolve, one training step on two samples (CPU)."""
    from gpuscout.measure import data

    model, given = load(ref, keras, policy)
    workload, info = resolve(model, given, keras)
    model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras))
    x, y = data.synthetic_batches(workload, INSPECT_BATCH, seed=0)[0]
    loss = model.train_on_batch(x, y)
    return {**info.model_dump(mode="json"), "name": display_name(ref), "inspect_loss": float(
        loss[0] if isinstance(loss, (list, tuple)) else loss)}
