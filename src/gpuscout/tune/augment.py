"""The augmentation a PyDataset does per sample on the host, moved into the model (issue 60).

A `__getitem__` that flips, crops, shifts and rescales each image in Python holds its worker
threads to one core under the GIL, and worker processes pay to hand each batch over (0.42x on a
16-core H100 host, docs/benchmarks.md). Keras' preprocessing layers do the same on the device,
inside the compiled step, for the batch at once, and only while training. The baseline's probe
found the script's function that takes the time and told what it does as those layers
(child/sample_work.py, child/augment_match.py); the change makes that function return its image
as given and trains `keras.Sequential([Input, *layers, model])`, what the patch writes before the
script's compile. Where it cannot be moved, the lines that take the time are named instead.
"""

from __future__ import annotations

import os

from gpuscout.record.watch import SAMPLE_WORK_SHARE, SampleWork, WatchRecord
from gpuscout.tune.change import Change, not_waiting


def augment_in_model(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.input_type != "PyDataset":
        return f"the input is {main.input_type}, not a PyDataset"
    reason = not_waiting(r)
    if reason:
        return reason
    wait = r.input_wait_share
    work = main.sample_work
    if work is None:
        return "where the PyDataset's __getitem__ spends its time was not seen (not the script's own, or a tracer on)"
    function = work.function
    if function is None or function.share < SAMPLE_WORK_SHARE:
        return f"no function of the script's takes the time of __getitem__: {hot_lines(work)}"
    where = f"{function.name} ({os.path.basename(function.file)}:{function.line})"
    if main.own_train_step:
        return (
            f"the model defines its own train_step: a model around it would train with Keras' step; {where}"
            f" could be moved by hand"
        )
    if not function.why_not and not function.layers:  # a plain watch's record: the function not called again
        return (
            f"{where} takes {function.share:.0%} of __getitem__: whether it can move into the model is told when "
            f"tune runs the script (its first baseline calls {function.name.split('.')[-1]} again)"
        )
    if function.why_not or not function.layers:
        return (
            f"{where} takes {function.share:.0%} of __getitem__ and cannot be moved as layers: "
            f"{function.why_not or 'nothing was told'}"
        )
    layers = ", ".join(layer.code() for layer in function.layers)
    shape = tuple(function.input_shape or ())
    line = (
        f"model = keras.Sequential([keras.Input(shape={shape}), {layers}, model])  # before compile\n"
        f"# and in __getitem__ (line {function.call_line}), {function.name.split('.')[-1]}(...) replaced by its "
        f"{function.argument}"
    )
    settings = {
        "augment_in_model": {
            "file": function.file,
            "line": function.line,
            "argument": function.argument,
            "input_shape": function.input_shape,
            "layers": [layer.model_dump() for layer in function.layers],
        }
    }
    why = (
        f"{where} takes {function.share:.0%} of __getitem__ ({function.calls_per_batch:g} calls a batch) and the "
        f"loop waited {wait:.0%}; {function.explained} calls of it again were each {describe(function.layers)} "
        f"of its input"
    )
    return [Change("augment_in_model", "augment_in_model", settings, line, why)]


def describe(layers) -> str:
    words = {
        "Rescaling": "rescaled",
        "Normalization": "normalised per channel",
        "RandomFlip": "flipped or not",
        "CenterCrop": "centre-cropped",
    }
    return ", ".join(
        "shifted"
        if layer.kwargs.get("pad_height") or layer.kwargs.get("pad_width")
        else "cropped"
        if layer.name == "RandomCropEach"
        else words.get(layer.name, layer.name)
        for layer in layers
    )


def hot_lines(work: SampleWork) -> str:
    """The lines of __getitem__ that take its time, with their shares: what to move by hand."""
    name = os.path.basename(work.file)
    shown = ", ".join(f"{name}:{line.line} {line.share:.0%}" for line in work.lines[:3])
    return (
        f"its own lines take it ({shown} of {work.getitem_s * 1000:.1f} ms a call)"
        if shown
        else f"{work.getitem_s * 1000:.1f} ms a call"
    )
