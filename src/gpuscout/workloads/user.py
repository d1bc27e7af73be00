"""A user's own model as a workload: `--model file.py:build` or `--model model.keras`.

`build()` returns the model and what its input is::

    from gpuscout import InputSpec

    def build():
        inputs = keras.Input((32, 32, 3))
        ...
        return keras.Model(inputs, logits), InputSpec(shape=(32, 32, 3), num_classes=10)

(a dict with the same keys works too, so the file need not import gpuscout). The model may be
compiled: its optimizer and loss are then used; otherwise Adam (learning rate 1e-3) and sparse
categorical cross-entropy (on logits, unless the last layer applies a softmax), or binary
cross-entropy when the last layer applies a sigmoid. The synthetic targets follow the loss, for
every built-in Keras loss (child/user_model.py LABEL_KINDS): class ids, one-hot vectors, 0/1,
probability vectors, positive values, or floats for a regression. `build()` runs in
the child after the precision policy is set, so mixed precision applies to the layers it creates.
A saved `.keras` model is loaded (with its compiled optimizer and loss when it was saved
compiled); under a mixed precision, or when `--input-shape` fills in free input dimensions, it is
cloned layer by layer (with that policy, on that shape) and given back its weights.

Before any measurement, an inspection child (gpuscout.child.user_model) loads the model on the
CPU, works out its inputs and labels, counts its FLOPs and runs one training step on two samples:
a mistake in the user's file then stops the command with the file's traceback (exit 2) instead of
failing on the GPU.

FLOPs per sample: the user's `flops_per_sample` (forward, 2 FLOPs per multiply-add) when given;
otherwise counted from the layers (workloads/flops.py: convolutions, dense and einsum-dense
layers, the attention products of Keras' MultiHeadAttention and of gpuscout's attention). The
count is exact for models made of those layers; elementwise work and layers it does not know are
left out, so the record states the counted share of the FLOPs (an upper bound: child/flops.py).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.core import inputs
from gpuscout.core.errors import UsageError, UserCodeError, parse_whole_numbers
from gpuscout.core.spec import ModelInfo, ModelRef
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


def parse_ref(text: str, input_shape: str | None = None) -> ModelRef:
    """`path.py[:function]` or `path.keras`, checked before anything runs."""
    path_text, _, function = text.partition(":") if not Path(text).exists() else (text, "", "")
    path = Path(path_text).expanduser()
    if path.suffix not in (".py", ".keras"):
        raise UsageError(
            f"--model {text!r}: give a Python file and its function (model.py:build) "
            "or a saved Keras model (model.keras)"
        )
    if not path.exists():
        raise UsageError(f"--model file not found: {path}")
    if not path.is_file():  # a folder, a FIFO nobody writes to, a device: reading one would never end
        raise UsageError(f"--model {path} is not a regular file: give model.py:build or model.keras")
    if path.suffix == ".keras" and function:
        raise UsageError(f"--model {text!r}: a .keras file has no function to name; drop ':{function}'")
    if path.suffix == ".py" and function and not function.isidentifier():
        raise UsageError(f"--model {text!r}: {function!r} is not a Python function name")
    shape = parse_shape(input_shape) if input_shape else None  # a build() file: overrides its InputSpec's
    if path.suffix == ".py":
        check_source(path, function or "build")
    else:
        check_saved(path)
    return ModelRef(
        path=str(path.resolve()),
        function=(function or "build") if path.suffix == ".py" else None,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        input_shape=shape,
    )


def check_saved(path: Path) -> None:
    """A .keras file is a zip archive holding config.json (Keras 3's saving format): anything else
    is said to be what it is here, not as Keras' "File not found" from a child 30 s later."""
    size = path.stat().st_size
    if size == 0:
        raise UsageError(f"--model {path.name} is empty (0 bytes): not a saved Keras model")
    if not zipfile.is_zipfile(path):
        raise UsageError(
            f"--model {path.name} is not a saved Keras model: a .keras file is a zip archive "
            "(model.save('model.keras')), and this one is not"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"--model {path.name} is not a readable saved Keras model ({exc})") from None
    if "config.json" not in names:
        raise UsageError(f"--model {path.name} is a zip archive without a Keras model in it (no config.json)")


# A model's Python file is a page or two; 16 MiB is far beyond any (and parses in about a second).
MAX_SOURCE_BYTES = 16 * 2**20


def check_source(
    path: Path, function: str, option: str = "--model", what: str = "a Python file that builds a model"
) -> None:
    """The file (a regular one, of at most MAX_SOURCE_BYTES) parses and defines `function`, found
    in milliseconds by reading it (no child, no framework): a typo in the name or a syntax error
    is one line, with a suggestion."""
    try:
        tree = ast.parse(inputs.read_bytes(path, what, MAX_SOURCE_BYTES), filename=str(path))
    except SyntaxError as exc:
        where = f" line {exc.lineno}" if exc.lineno else ""
        code = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise UsageError(f"{option} {path.name}{where}: {exc.msg}{code}") from None
    except ValueError as exc:  # NUL bytes (Python 3.11 says so with a ValueError)
        raise UsageError(f"{option} {path.name}: not Python source ({exc})") from None
    functions, defined = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return  # a star import may define it: the inspection child will tell
            defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if function in functions or function in defined:
        return
    close = difflib.get_close_matches(function, sorted(functions), n=3, cutoff=0.5)
    listed = (
        f"did you mean {', '.join(close)}?"
        if close
        else (f"its functions are {', '.join(sorted(functions))}" if functions else "it defines no function")
    )
    raise UsageError(
        f"{option} {path.name}: no function {function!r} in it: {listed} (name it as {path.name}:FUNCTION)"
    )


def parse_shape(text: str) -> tuple[int, ...]:
    """'32,32,3' or '32x32x3': a sample's shape, each dimension a positive int32 (what frameworks
    index a dimension by), in order, repeats allowed, at most 8 of them."""
    shape = parse_whole_numbers(
        text,
        "--input-shape",
        "positive whole numbers per sample",
        "32,32,3",
        most=2**31 - 1,
        distinct=False,
        sort=False,
        separators=",x",
    )
    if len(shape) > 8:
        raise UsageError(f"--input-shape {text[:40]!r} has {len(shape)} dimensions: a sample has 8 at most")
    return shape


def display_name(ref: ModelRef) -> str:
    name = Path(ref.path).name
    return f"{name}:{ref.function}" if ref.function else name


def workload_from_info(info: ModelInfo) -> Workload:
    """The parent's view of a user model: enough for records, FLOPs and batch data."""
    return Workload(
        name=info.name,
        description=f"user model ({info.params:,} parameters)",
        input_kind="ids" if info.input_dtype.startswith("int") else "vector",
        num_classes=info.num_classes or 1,
        default_batch_size=info.default_batch_size,
        reference_dataset_size=None,
        reference_dataset=None,
        unit="samples",
        build_model=_not_in_parent,
        build_optimizer=_not_in_parent,
        forward_flops=lambda seq_len: info.forward_flops,
        fixed_input_shape=info.input_shape,
        label_shape=info.label_shape,
        label_kind=info.label_kind,
        vocab_size=info.vocab_size,
    )


def inspect_in_child(
    ref: ModelRef, backend, precision, flops_per_sample: float | None = None, timeout_s: float = 600.0
) -> ModelInfo:
    """Run the inspection child (on the CPU): the model's description, or the user's traceback
    as a UserCodeError (exit 2)."""
    from gpuscout.core.spec import Task, build_spec
    from gpuscout.executor.local import run_child

    spec = build_spec(
        workload=display_name(ref),
        backend=backend,
        precision=precision,
        batch_size=INSPECT_BATCH,
        task=Task.inspect,
        model=ref,
        gpu_index=None,
    )
    outcome = run_child(spec, timeout_s=timeout_s)
    if outcome.status != "ok":
        traceback_text = last_traceback(outcome.stderr_tail)
        where = user_frame(traceback_text, ref)
        raise UserCodeError(
            f"{display_name(ref)}: {outcome.message}{f' ({where})' if where else ''}: the model "
            "could not be built and trained for one step on the CPU",
            traceback_text,
        )
    info = outcome.result.model_info
    if flops_per_sample is not None:
        info = info.model_copy(
            update={"forward_flops": float(flops_per_sample), "flops_source": "given", "flops_coverage": None}
        )
    return info


def user_frame(traceback_text: str, ref: ModelRef) -> str | None:
    """Where in the user's file it failed: the innermost frame of that file ("model.py line 6, in
    build", "at import" for module level)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback_text)
    mine = [(line, function) for file, line, function in frames if Path(file).name == Path(ref.path).name]
    if not mine:
        return None
    line, function = mine[-1]
    return f"{Path(ref.path).name} line {line}, " + ("at import" if function == "<module>" else f"in {function}")


def last_traceback(stderr: str) -> str:
    """The last Python traceback in a child's stderr, without the frameworks' log lines before it
    and without gpuscout's own frames (the user's are what they can fix)."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return stderr
    ours = str(Path(__file__).resolve().parents[1])  # the gpuscout package
    kept, skipping = [], False
    for line in stderr[start:].splitlines():
        if line.startswith('  File "'):
            skipping = line[len('  File "') :].startswith(ours) or "<frozen runpy>" in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def _not_in_parent(*args):
    raise RuntimeError("a user model is built in the child process only")
