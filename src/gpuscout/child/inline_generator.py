"""A generator function's augmentation, written in its own loop, told against what its batches
read, and the generator fit is given made again from the rewritten function (tune's
augment_inline for a generator, issue 77). The generator fit is given has not started: its
function and arguments are read from its frame (`generator_made`); after the timed steps its
batches are made again from them, its image arrays recorded and numpy's and random's state put
back as it was (child/inline_augment.py holds the recording, the rewrite's compiling and the
PyDataset's form). Only the standard library and numpy are imported.
"""

from __future__ import annotations

import os
import sys

from gpuscout.child.inline_augment import (
    UNREADABLE,
    Reads,
    compiled,
    image_array,
    images_of,
    index_text,
    indexing,
    locals_at_return,
    recording,
    same,
    source_of,
    told,
)
from gpuscout.core.getitem_rewrite import rewrite

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
        lines, node = source_of(code)
    except (OSError, SyntaxError, ValueError) as exc:
        return {"why_not": f"its source cannot be read ({type(exc).__name__})"}
    if node is None:
        return {"why_not": "its source cannot be read"}
    owner_name = node.args.args[0].arg if node.args.args and node.args.args[0].arg == "self" else None
    owner = arguments.get(owner_name) if owner_name else None
    module = function.__globals__
    given = {name for name, value in arguments.items() if image_array(value)}
    attributes = {name for name, value in vars(owner).items() if image_array(value)} if owner is not None else set()
    named = {name for name in code.co_names if name in module and image_array(module[name])}
    arrays = {
        **{name: (name, arguments[name]) for name in given},
        **{f"{owner_name}.{name}": (name, vars(owner)[name]) for name in attributes},
        **{name: (name, module[name]) for name in named if name not in given},
    }
    if not arrays:
        return {"why_not": "its images are not an array (N x height x width x channels) it reads by index"}
    reads = {text: Reads() for text in arrays}
    recorded = dict(arguments)
    for name in given:
        recorded[name] = recording(arguments[name], reads[name])
    for name in attributes:
        setattr(owner, name, recording(vars(owner)[name], reads[f"{owner_name}.{name}"]))
    saved = {name: module[name] for name in named if name not in given}
    for name in saved:
        module[name] = recording(saved[name], reads[name])
    states = np.random.get_state(), random.getstate()
    made, marks = [], []
    try:
        generator = function(**recorded)
        try:
            try:
                first, kept = locals_at_return(lambda: next(generator), code)
            except StopIteration:  # the script's to tell, not gpuscout's failure: said in the record
                np.random.set_state(states[0])
                random.setstate(states[1])
                return {"why_not": "made again from the arguments fit's generator was made with, it yielded nothing"}
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
    try:
        read = [text for text, r in reads.items() if r.seen]
        if len(read) != 1:
            return {
                "why_not": f"it reads images from {len(read) or 'none'} of its arrays ({', '.join(read) or 'none'})"
            }
        (source,) = read
        starts = [0] + [m[source] for m in marks[:-1]]
        indices = [reads[source].seen[a : m[source]] for a, m in zip(starts, marks)]
        out = _generator_facts(made, indices, arrays[source][1], source, kept, node, lines, function, arguments, states)
    finally:
        np.random.set_state(states[0])  # the script's random numbers go on as if nothing was called
        random.setstate(states[1])
    if "layers_told" in out:
        out.update(as_record(out.pop("layers_told")))
    return out


def _generator_facts(made, indices, array, source, kept, node, lines, function, arguments, states) -> dict:
    """The facts of `tell_generator` from the batches it made (`made`) and the indices each read,
    from the random `states` the batches were made from."""
    import random

    import numpy as np

    from gpuscout.child.augment_match import identify_batches

    if any(UNREADABLE in batch for batch in indices):
        return {"why_not": f"it reads {source} by a mask or another index that cannot be followed"}
    images = [images_of(batch) for batch in made]
    for batch, picked in zip(images, indices):
        if not isinstance(batch, np.ndarray) or batch.ndim != 4 or len(batch) != len(picked):
            count = len(batch) if hasattr(batch, "__len__") else "no"
            return {"why_not": f"it yields {count} images for {len(picked)} read from {source}"}
    where = index_text(kept, indices[0], "", "", None, (), indexing(node))
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
            if not same(mine, theirs):
                return {"why_not": "without its augmentation, the generator yields other labels: they depend on it"}
    if not same(images_of(raw), array[indices[0]]):
        return {"why_not": "without its augmentation, the generator reads other images: its draws are shared with it"}
    layers, explained = identify_batches([(array[picked], batch) for picked, batch in zip(indices, images)])
    return {
        **told(function.__code__.co_filename, node, source, where, found, array, explained),
        "generator": True,
        "layers_told": layers,
    }


def told_for_the_record(made) -> dict:
    """`tell_generator` of what `generator_made` read, after the timed steps; a failure here is
    gpuscout's, reported once, and said in the record."""
    from gpuscout.child.watch_state import report_failure

    try:
        return tell_generator(*made)
    except Exception as exc:
        report_failure("telling the generator's augmentation", exc)
        return {"why_not": f"gpuscout could not read it ({type(exc).__name__})"}


def hand_generator_as_read(generator, settings: dict):
    """In a run that applies the change to a generator fit is given: a new generator from the
    rewritten function, made with the same arguments, and what was done, for the record."""
    made = generator_made(generator)
    if made is None:
        raise LookupError("fit's generator has started, or its function cannot be found")
    function, arguments = made
    code = function.__code__
    lines, node = source_of(code)
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
