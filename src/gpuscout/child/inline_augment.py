"""Augmentation written inline in a PyDataset's `__getitem__` (a loop that crops, flips and
normalises each image in numpy, no function of its own): told as Keras layers, and the
`__getitem__` that returns the images as read instead (tune's `augment_inline`, issue 77).

What `__getitem__` returns is set against what it read. One call runs with the dataset's image
arrays (attributes of shape N x height x width x channels) wrapped so that every index read from
them is recorded, and with its locals kept at its return: the array read and the variable that
holds the indices read (`idx`), or, where none does, a contiguous range of the batch index. The
function is then rewritten from its own source, as the patch writes it (core/getitem_rewrite.py):
its return gives `self.<images>[<indices>]` in place of the images it made, and every statement
whose result no longer reaches the return (the loop that augmented, its buffers, its random
draws) is left out. The rewritten function, called on the same batch index, must return the same labels
(and weights) as the script's; its images are then the input the script's own function is
called again on (child/augment_match.identify), which tells its outputs as layers. Only the
standard library and numpy are imported.
"""

from __future__ import annotations

import ast
import os
import sys

from gpuscout.core.getitem_rewrite import Rewrite, function_at, names, rewrite

# Where an index read cannot be told (a boolean mask, a tuple of arrays) the record is given up
UNREADABLE = object()


class Reads:
    """The indices read from one array, in order (ints; UNREADABLE where one cannot be told)."""

    def __init__(self) -> None:
        self.seen: list = []


def recording(array, reads: Reads):
    import numpy as np

    class Recorded(np.ndarray):
        def __getitem__(self, key):
            record_read(key, len(self), reads)
            return np.asarray(np.ndarray.__getitem__(self.view(np.ndarray), key))

    return array.view(Recorded)


def record_read(key, length: int, reads: Reads) -> None:
    import numpy as np

    first = key[0] if isinstance(key, tuple) and key else key
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        reads.seen.append(int(first) % length)
    elif isinstance(first, slice):
        reads.seen.extend(range(*first.indices(length)))
    elif isinstance(first, (list, np.ndarray, range)) and np.asarray(first).dtype.kind in "iu":
        reads.seen.extend(int(v) % length for v in np.asarray(first).ravel())
    else:
        reads.seen.append(UNREADABLE)


def locals_at_return(call, code):
    """`call()` with the locals of `code`'s frame kept as it returns (its own frame only)."""
    kept: dict = {}

    def on_call(frame, event, arg):
        if frame.f_code is not code:
            return None

        def on_return(frame, event, arg):
            if event == "return":
                kept.update(frame.f_locals)
            return on_return

        return on_return

    sys.settrace(on_call)
    try:
        result = call()
    finally:
        sys.settrace(None)
    return result, kept


def source_of(code) -> tuple[list[str], ast.FunctionDef | None]:
    """The lines of the file `code` was compiled from, and the function defined where it begins."""
    with open(code.co_filename, encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    return lines, function_at(ast.parse("".join(lines)), code.co_firstlineno)


def images_of(batch):
    return batch[0] if isinstance(batch, tuple) else batch


def indexing(function: ast.FunctionDef) -> set[str]:
    """The names the function indexes by or loops over (self.x[idx], idx[k], for j in idx)."""
    out = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript):
            out |= names(node.slice)
        elif isinstance(node, (ast.For, ast.comprehension)):
            out |= names(node.iter)
    return out


def index_text(
    kept: dict,
    indices: list[int],
    self_name: str,
    index_name: str,
    dataset,
    names: tuple[str, ...],
    indexing: set[str],
    module: dict | None = None,
) -> str | None:
    """Source text for the indices read: the local that holds them (one the function indexes by or
    loops over); else a slice of the batch index by a batch size (`i * self.bs : (i + 1) * self.bs`)
    where they are its contiguous range, or that slice of an index array where they are its
    entries (`self.order[i * B : (i + 1) * B]`: issue 86, a loop that reads `src[i * B + j]` or
    `src[order[i * B + j]]`). A batch size is the dataset's attribute, a module global the function
    names, or a local it kept; an index array the dataset's attribute or such a global."""
    import numpy as np

    for name, value in kept.items():
        if name not in indexing:  # a value that happens to equal them (labels 0..n-1) is not the indices
            continue
        if name != self_name and isinstance(value, (list, range, np.ndarray)) and len(value) == len(indices):
            given = np.asarray(value)
            if given.ndim == 1 and given.dtype.kind in "iu" and np.array_equal(given, indices):
                return name
    index = kept.get(index_name)
    if not indices or not isinstance(index, int) or isinstance(index, bool):
        return None
    module = module or {}
    named = {name: getattr(dataset, name, None) for name in names}  # its class's too (bs = 8 on the class)
    owned = {f"{self_name}.{k}": v for k, v in {**(vars(dataset) if dataset is not None else {}), **named}.items()}
    found = {k: module[k] for k in names if k in module}
    local = {k: v for k, v in kept.items() if k not in (self_name, index_name)}
    count = len(indices)
    sizes = [t for t, v in (*owned.items(), *found.items(), *local.items()) if _whole(v) and v == count]
    orders = [
        t
        for t, v in (*owned.items(), *found.items())
        if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iu" and len(v) >= count
    ]
    contiguous = indices == list(range(indices[0], indices[0] + count))
    for size in sizes:
        span = f"{index_name} * {size} : ({index_name} + 1) * {size}"
        if contiguous and index * count == indices[0]:
            return span
        for order in orders:
            value = owned.get(order, found.get(order))
            if np.array_equal(value[index * count : (index + 1) * count], indices):
                return f"{order}[{span}]"
    return None


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tell(dataset, getitem, index: int = 0) -> dict:
    """What `getitem` (the class's own __getitem__) does inline, for the record
    (record.watch.InlineAugment): the layers, the rewrite that hands the images as read, or why
    either cannot be made."""
    import numpy as np

    from gpuscout.child.augment_match import as_record, identify

    code = getattr(getitem, "__code__", None)
    if code is None or getitem.__closure__:
        return {"why_not": "__getitem__ is not a plain function of the script's"}
    if sys.gettrace() is not None:
        return {"why_not": "another tracer (a debugger, coverage) is on"}
    try:
        lines, function = source_of(code)
    except (OSError, SyntaxError, ValueError) as exc:
        return {"why_not": f"its source cannot be read ({type(exc).__name__})"}
    if function is None or len(function.args.args) < 2:
        return {"why_not": "its source cannot be read"}
    self_name, index_name = function.args.args[0].arg, function.args.args[1].arg
    # the image arrays it can read: the dataset's attributes, and its module's globals it named
    attributes = {name for name, value in vars(dataset).items() if image_array(value)}
    module = getitem.__globals__
    named = {name for name in code.co_names if name in module and image_array(module[name])}
    if not attributes and not named:
        return {"why_not": "its images are not an array (N x height x width x channels) it reads by index"}
    reads = {name: Reads() for name in (*attributes, *named)}
    own = {name: vars(dataset)[name] for name in attributes}
    for name in attributes:
        setattr(dataset, name, recording(own[name], reads[name]))
    saved = {name: module[name] for name in named}
    for name in named:
        module[name] = recording(saved[name], reads[name])
    try:
        made, kept = locals_at_return(lambda: getitem(dataset, index), code)
    finally:
        for name, value in own.items():
            setattr(dataset, name, value)
        module.update(saved)
    read = {name: r.seen for name, r in reads.items() if r.seen}
    images = images_of(made)
    if len(read) != 1:
        return {"why_not": f"it reads images from {len(read) or 'none'} of its arrays ({', '.join(read) or 'none'})"}
    ((source, indices),) = read.items()
    array = f"{self_name}.{source}" if source in attributes else source
    if UNREADABLE in indices:
        return {"why_not": f"it reads {array} by a mask or another index that cannot be followed"}
    if not isinstance(images, np.ndarray) or images.ndim != 4 or len(images) != len(indices):
        return {
            "why_not": f"it returns {len(images) if hasattr(images, '__len__') else 'no'} images for "
            f"{len(indices)} read from {array}"
        }
    where = index_text(
        kept, indices, self_name, index_name, dataset, code.co_names, indexing(function), getitem.__globals__
    )
    if where is None:
        return {"why_not": f"no variable of __getitem__ holds the indices it reads from {array}"}
    found = rewrite(function, f"{array}[{where}]", lines, 1)
    if isinstance(found, str):
        return {"why_not": found}
    try:
        raw = compiled(found, lines, function, getitem)(dataset, index)
    except Exception as exc:  # the script's code without its augmentation: said, never raised
        return {"why_not": f"__getitem__ without its augmentation raised {type(exc).__name__}: {exc}"[:300]}
    if isinstance(made, tuple):
        if not isinstance(raw, tuple) or len(raw) != len(made):
            return {"why_not": "the rewritten __getitem__ returns another shape of batch"}
        for mine, theirs in zip(raw[1:], made[1:]):
            if not same(mine, theirs):
                return {"why_not": "without its augmentation, __getitem__ returns other labels: they depend on it"}
    raw_images = np.asarray(images_of(raw))
    try:
        layers, explained = identify(lambda: images_of(getitem(dataset, index)), raw_images)
    except Exception as exc:  # the script's __getitem__, called again: never our failure
        return {"why_not": f"calling __getitem__ again raised {type(exc).__name__}: {exc}"[:300]}
    return {**told(code.co_filename, function, array, where, found, raw_images, explained), **as_record(layers)}


def told(file: str, node: ast.FunctionDef, images: str, where: str, found: Rewrite, read, explained: int) -> dict:
    """What the record holds of a rewrite that hands the images as read (record.watch.InlineAugment):
    where the function is, what it reads them from and by, the lines left out, the images' shape."""
    return {
        "file": file,
        "line": node.lineno,
        "end_line": node.end_lineno,
        "images": images,
        "indices": where,
        "removed": [list(r) for r in found.removed],
        "input_shape": list(read.shape[1:]),
        "input_dtype": str(read.dtype),
        "explained": explained,
    }


def image_array(value) -> bool:
    import numpy as np

    return isinstance(value, np.ndarray) and value.ndim == 4 and 1 <= value.shape[-1] <= 4 and len(value) > 0


def same(a, b) -> bool:
    import numpy as np

    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:
        return a is b


def compiled(found: Rewrite, lines: list[str], function: ast.FunctionDef, getitem):
    """The rewritten function, compiled in the script's module (its globals) under its file name,
    its lines where they are in the file (a traceback points at the script's own lines)."""
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    text = found.applied(lines[first - 1 : function.end_lineno], first)
    import textwrap

    tree = ast.parse(textwrap.dedent(text))
    ast.increment_lineno(tree, first - 1)
    tree.body[0].decorator_list = []  # type: ignore[attr-defined]
    namespace: dict = {}
    exec(compile(tree, getitem.__code__.co_filename, "exec"), getitem.__globals__, namespace)
    return namespace[function.name]


def hand_images_as_read(dataset, settings: dict) -> str:
    """In a run that applies the change: the class's __getitem__ rewritten as the patch writes it
    (its file read again, the same rewrite); what was done, for the record."""
    target = (os.path.abspath(str(settings["file"])), int(settings["line"]))
    for klass in type(dataset).__mro__:
        getitem = vars(klass).get("__getitem__")
        code = getattr(getitem, "__code__", None)
        if code is None:
            continue
        lines, function = source_of(code)
        if function is None or (os.path.abspath(code.co_filename), function.lineno) != target:
            continue
        images = f"{settings['images']}[{settings['indices']}]"
        found = rewrite(function, images, lines, 1)
        if isinstance(found, str):
            raise LookupError(found)
        klass.__getitem__ = compiled(found, lines, function, getitem)  # type: ignore[attr-defined]
        return f"{klass.__name__}.__getitem__ returns {images}"
    raise LookupError(f"no __getitem__ defined at {settings['file']}:{settings['line']} reaches the PyDataset")
