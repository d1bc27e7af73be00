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
_UNREADABLE = object()


class _Reads:
    """The indices read from one array, in order (ints; _UNREADABLE where one cannot be told)."""

    def __init__(self) -> None:
        self.seen: list = []


def _recording(array, reads: _Reads):
    import numpy as np

    class Recorded(np.ndarray):
        def __getitem__(self, key):
            _record(key, len(self), reads)
            return np.asarray(np.ndarray.__getitem__(self.view(np.ndarray), key))

    return array.view(Recorded)


def _record(key, length: int, reads: _Reads) -> None:
    import numpy as np

    first = key[0] if isinstance(key, tuple) and key else key
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        reads.seen.append(int(first) % length)
    elif isinstance(first, slice):
        reads.seen.extend(range(*first.indices(length)))
    elif isinstance(first, (list, np.ndarray, range)) and np.asarray(first).dtype.kind in "iu":
        reads.seen.extend(int(v) % length for v in np.asarray(first).ravel())
    else:
        reads.seen.append(_UNREADABLE)


def _locals_at_return(call, code):
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


def _images_of(batch):
    return batch[0] if isinstance(batch, tuple) else batch


def _indexing(function: ast.FunctionDef) -> set[str]:
    """The names the function indexes by or loops over (self.x[idx], idx[k], for j in idx)."""
    out = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript):
            out |= names(node.slice)
        elif isinstance(node, (ast.For, ast.comprehension)):
            out |= names(node.iter)
    return out


def _index_text(
    kept: dict, indices: list[int], self_name: str, index_name: str, dataset, names: tuple[str, ...], indexing: set[str]
) -> str | None:
    """Source text for the indices read: the local that holds them (one the function indexes by or
    loops over), or a slice of the batch index by the dataset's batch size where they are its
    contiguous range."""
    import numpy as np

    for name, value in kept.items():
        if name not in indexing:  # a value that happens to equal them (labels 0..n-1) is not the indices
            continue
        if name != self_name and isinstance(value, (list, range, np.ndarray)) and len(value) == len(indices):
            given = np.asarray(value)
            if given.ndim == 1 and given.dtype.kind in "iu" and np.array_equal(given, indices):
                return name
    index = kept.get(index_name)
    if not indices or indices != list(range(indices[0], indices[0] + len(indices))) or not isinstance(index, int):
        return None
    named = {name: getattr(dataset, name, None) for name in names}  # its class's too (bs = 8 on the class)
    for attribute, size in {**vars(dataset), **named}.items():
        if isinstance(size, int) and not isinstance(size, bool) and size == len(indices) and index * size == indices[0]:
            return f"{index_name} * {self_name}.{attribute} : ({index_name} + 1) * {self_name}.{attribute}"
    return None


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
        with open(code.co_filename, encoding="utf-8") as handle:
            lines = handle.read().splitlines(keepends=True)
        function = function_at(ast.parse("".join(lines)), code.co_firstlineno)
    except (OSError, SyntaxError, ValueError) as exc:
        return {"why_not": f"its source cannot be read ({type(exc).__name__})"}
    if function is None or len(function.args.args) < 2:
        return {"why_not": "its source cannot be read"}
    self_name, index_name = function.args.args[0].arg, function.args.args[1].arg
    # the image arrays it can read: the dataset's attributes, and its module's globals it named
    attributes = {name for name, value in vars(dataset).items() if _image_array(value)}
    module = getitem.__globals__
    named = {name for name in code.co_names if name in module and _image_array(module[name])}
    if not attributes and not named:
        return {"why_not": "its images are not an array (N x height x width x channels) it reads by index"}
    reads = {name: _Reads() for name in (*attributes, *named)}
    own = {name: vars(dataset)[name] for name in attributes}
    for name in attributes:
        setattr(dataset, name, _recording(own[name], reads[name]))
    saved = {name: module[name] for name in named}
    for name in named:
        module[name] = _recording(saved[name], reads[name])
    try:
        made, kept = _locals_at_return(lambda: getitem(dataset, index), code)
    finally:
        for name, value in own.items():
            setattr(dataset, name, value)
        module.update(saved)
    read = {name: r.seen for name, r in reads.items() if r.seen}
    images = _images_of(made)
    if len(read) != 1:
        return {"why_not": f"it reads images from {len(read) or 'none'} of its arrays ({', '.join(read) or 'none'})"}
    ((source, indices),) = read.items()
    array = f"{self_name}.{source}" if source in attributes else source
    if _UNREADABLE in indices:
        return {"why_not": f"it reads {array} by a mask or another index that cannot be followed"}
    if not isinstance(images, np.ndarray) or images.ndim != 4 or len(images) != len(indices):
        return {
            "why_not": f"it returns {len(images) if hasattr(images, '__len__') else 'no'} images for "
            f"{len(indices)} read from {array}"
        }
    where = _index_text(kept, indices, self_name, index_name, dataset, code.co_names, _indexing(function))
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
            if not _same(mine, theirs):
                return {"why_not": "without its augmentation, __getitem__ returns other labels: they depend on it"}
    raw_images = np.asarray(_images_of(raw))
    try:
        layers, explained = identify(lambda: _images_of(getitem(dataset, index)), raw_images)
    except Exception as exc:  # the script's __getitem__, called again: never our failure
        return {"why_not": f"calling __getitem__ again raised {type(exc).__name__}: {exc}"[:300]}
    return {**_told(code.co_filename, function, array, where, found, raw_images, explained), **as_record(layers)}


def _told(file: str, node: ast.FunctionDef, images: str, where: str, found: Rewrite, read, explained: int) -> dict:
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


def _image_array(value) -> bool:
    import numpy as np

    return isinstance(value, np.ndarray) and value.ndim == 4 and 1 <= value.shape[-1] <= 4 and len(value) > 0


def _same(a, b) -> bool:
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
        with open(code.co_filename, encoding="utf-8") as handle:
            lines = handle.read().splitlines(keepends=True)
        function = function_at(ast.parse("".join(lines)), code.co_firstlineno)
        if function is None or (os.path.abspath(code.co_filename), function.lineno) != target:
            continue
        images = f"{settings['images']}[{settings['indices']}]"
        found = rewrite(function, images, lines, 1)
        if isinstance(found, str):
            raise LookupError(found)
        klass.__getitem__ = compiled(found, lines, function, getitem)  # type: ignore[attr-defined]
        return f"{klass.__name__}.__getitem__ returns {images}"
    raise LookupError(f"no __getitem__ defined at {settings['file']}:{settings['line']} reaches the PyDataset")


# A generator's batches told against what they read: as many as make augment_match.TRIES images
GENERATOR_BATCHES = 6


def generator_made(generator):
    """The function a generator object was made by and the arguments it was given, read before its
    first batch: (function, arguments), or None where it has started or its function is not one of
    its module's or a method of its first argument's class."""
    import inspect

    if not inspect.isgenerator(generator) or inspect.getgeneratorstate(generator) != inspect.GEN_CREATED:
        return None
    code, frame = generator.gi_code, generator.gi_frame
    arguments = dict(frame.f_locals)
    for value in list(frame.f_globals.values()):
        if getattr(value, "__code__", None) is code:
            return value, arguments
    owner = arguments.get(code.co_varnames[0]) if code.co_argcount else None
    for klass in type(owner).__mro__ if owner is not None else ():
        for value in vars(klass).values():
            function = getattr(value, "__func__", value)
            if getattr(function, "__code__", None) is code:
                return function, arguments
    return None


def _source(code):
    with open(code.co_filename, encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    return lines, function_at(ast.parse("".join(lines)), code.co_firstlineno)


def tell_generator(function, arguments: dict) -> dict:
    """What a generator function yields against what it read, for the record (as `tell` is for a
    PyDataset): its batches made again from the arguments fit's generator was made with, the image
    arrays it reads (its arguments, its first argument's attributes where it is a method, its
    module's globals it names) recorded, the random state as it was before and after."""
    import random

    import numpy as np

    from gpuscout.child.augment_match import as_record

    code = function.__code__
    if function.__closure__:
        return {"why_not": "the generator is defined inside another function (its closure cannot be rebuilt)"}
    if sys.gettrace() is not None:
        return {"why_not": "another tracer (a debugger, coverage) is on"}
    try:
        lines, node = _source(code)
    except (OSError, SyntaxError, ValueError) as exc:
        return {"why_not": f"its source cannot be read ({type(exc).__name__})"}
    if node is None:
        return {"why_not": "its source cannot be read"}
    owner_name = node.args.args[0].arg if node.args.args and node.args.args[0].arg == "self" else None
    owner = arguments.get(owner_name) if owner_name else None
    module = function.__globals__
    given = {name for name, value in arguments.items() if _image_array(value)}
    attributes = {name for name, value in vars(owner).items() if _image_array(value)} if owner is not None else set()
    named = {name for name in code.co_names if name in module and _image_array(module[name])}
    arrays = {
        **{name: (name, arguments[name]) for name in given},
        **{f"{owner_name}.{name}": (name, vars(owner)[name]) for name in attributes},
        **{name: (name, module[name]) for name in named if name not in given},
    }
    if not arrays:
        return {"why_not": "its images are not an array (N x height x width x channels) it reads by index"}
    reads = {text: _Reads() for text in arrays}
    recorded = dict(arguments)
    for name in given:
        recorded[name] = _recording(arguments[name], reads[name])
    for name in attributes:
        setattr(owner, name, _recording(vars(owner)[name], reads[f"{owner_name}.{name}"]))
    saved = {name: module[name] for name in named if name not in given}
    for name in saved:
        module[name] = _recording(saved[name], reads[name])
    states = np.random.get_state(), random.getstate()
    made, marks = [], []
    try:
        generator = function(**recorded)
        try:
            first, kept = _locals_at_return(lambda: next(generator), code)
            made.append(first)
            marks.append({text: len(r.seen) for text, r in reads.items()})
            for _ in range(GENERATOR_BATCHES - 1):
                try:
                    made.append(next(generator))
                except StopIteration:
                    break
                marks.append({text: len(r.seen) for text, r in reads.items()})
        finally:
            generator.close()
    finally:
        for name in attributes:
            setattr(owner, name, arrays[f"{owner_name}.{name}"][1])
        module.update(saved)
    read = [text for text, r in reads.items() if r.seen]
    if len(read) != 1:
        np.random.set_state(states[0])
        random.setstate(states[1])
        return {"why_not": f"it reads images from {len(read) or 'none'} of its arrays ({', '.join(read) or 'none'})"}
    (source,) = read
    array = arrays[source][1]
    starts = [0] + [m[source] for m in marks[:-1]]
    indices = [reads[source].seen[a : m[source]] for a, m in zip(starts, marks)]
    try:
        out = _generator_facts(made, indices, array, source, kept, node, lines, function, arguments, states)
    finally:
        np.random.set_state(states[0])  # the script's random numbers go on as if nothing was called
        random.setstate(states[1])
    if "told" in out:
        out.update(as_record(out.pop("told")))
    return out


def _generator_facts(made, indices, array, source, kept, node, lines, function, arguments, states) -> dict:
    """The facts of `tell_generator` from the batches it made (`made`) and the indices each read,
    from the random `states` the batches were made from."""
    import random

    import numpy as np

    from gpuscout.child.augment_match import identify_batches

    if any(_UNREADABLE in batch for batch in indices):
        return {"why_not": f"it reads {source} by a mask or another index that cannot be followed"}
    images = [_images_of(batch) for batch in made]
    for batch, picked in zip(images, indices):
        if not isinstance(batch, np.ndarray) or batch.ndim != 4 or len(batch) != len(picked):
            count = len(batch) if hasattr(batch, "__len__") else "no"
            return {"why_not": f"it yields {count} images for {len(picked)} read from {source}"}
    where = _index_text(kept, indices[0], "", "", None, (), _indexing(node))
    if where is None:
        return {"why_not": f"no variable of the generator holds the indices it reads from {source}"}
    found = rewrite(node, f"{source}[{where}]", lines, 1)
    if isinstance(found, str):
        return {"why_not": found}
    # without its augmentation, from the same random state: the same images read, the same labels
    np.random.set_state(states[0])
    random.setstate(states[1])
    try:
        raw = next(compiled(found, lines, node, function)(**arguments))
    except Exception as exc:  # the script's code without its augmentation: said, never raised
        return {"why_not": f"the generator without its augmentation raised {type(exc).__name__}: {exc}"[:300]}
    first = made[0]
    if isinstance(first, tuple):
        if not isinstance(raw, tuple) or len(raw) != len(first):
            return {"why_not": "the rewritten generator yields another shape of batch"}
        for mine, theirs in zip(raw[1:], first[1:]):
            if not _same(mine, theirs):
                return {"why_not": "without its augmentation, the generator yields other labels: they depend on it"}
    if not _same(_images_of(raw), array[indices[0]]):
        return {"why_not": "without its augmentation, the generator reads other images: its draws are shared with it"}
    told, explained = identify_batches([(array[picked], batch) for picked, batch in zip(indices, images)])
    return {
        **_told(function.__code__.co_filename, node, source, where, found, array, explained),
        "generator": True,
        "told": told,
    }


def hand_generator_as_read(generator, settings: dict):
    """In a run that applies the change to a generator fit is given: a new generator from the
    rewritten function, made with the same arguments, and what was done, for the record."""
    made = generator_made(generator)
    if made is None:
        raise LookupError("fit's generator has started, or its function cannot be found")
    function, arguments = made
    code = function.__code__
    lines, node = _source(code)
    if node is None or (os.path.abspath(code.co_filename), node.lineno) != (
        os.path.abspath(str(settings["file"])),
        int(settings["line"]),
    ):
        raise LookupError(f"no generator defined at {settings['file']}:{settings['line']} made fit's")
    images = f"{settings['images']}[{settings['indices']}]"
    found = rewrite(node, images, lines, 1)
    if isinstance(found, str):
        raise LookupError(found)
    replaced = compiled(found, lines, node, function)(**arguments)
    generator.close()
    return replaced, f"{function.__qualname__} yields {images}"
