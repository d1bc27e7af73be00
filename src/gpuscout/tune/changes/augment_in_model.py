"""The augmentation a PyDataset does per sample on the host, moved into the model (issue 60).

A `__getitem__` that flips, crops, shifts and rescales each image in Python holds its worker
threads to one core under the GIL, and worker processes pay to hand each batch over (0.42x on a
16-core H100 host, docs/benchmarks.md). Keras' preprocessing layers do the same on the device,
inside the compiled step, for the batch at once, and only while training. The baseline's probe
found the script's function that takes the time and told what it does as those layers
(child/sample_work.py, child/augment_match.py); the change makes that function return its image
as given and trains `keras.Sequential([Input, *layers, model])`, what the patch writes before the
script's compile. Where it cannot be moved, the lines that take the time are named instead."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from gpuscout.analysis.repeats import definition
from gpuscout.record.augment import SAMPLE_WORK_SHARE, AugmentLayer, SampleFunction, SampleWork, behind_layers
from gpuscout.record.watch import CallSite, WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import (
    Edit,
    NotLocated,
    at,
    before_statement,
    call_at,
    insert_after_imports,
    name_of,
    offsets,
    order,
)


def augment_in_model(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
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
        return (
            f"no function of the script's takes the time of __getitem__ ({hot_lines(work)}): "
            "augment_inline moves its own lines"
        )
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
    line = (
        f"{behind_layers('model', function.input_shape, function.layers)}  # before compile\n"
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


def describe(layers: list[AugmentLayer]) -> str:
    words = {
        "Rescaling": "rescaled",
        "Normalization": "normalised per channel",
        "RandomFlip": "flipped or not",
        "CenterCrop": "centre-cropped",
    }
    return ", ".join(
        "shifted, its edges mirrored"
        if layer.kwargs.get("fill_mode") in ("reflect", "symmetric")
        else "shifted"
        if layer.kwargs.get("pad_height") or layer.kwargs.get("pad_width")
        else "cropped"
        if layer.name == "RandomCropEach"
        else words.get(layer.name, layer.name)
        for layer in layers
    )


# What the input waits on once the per-image work runs in the model (augment_inline's too)
PER_IMAGE_LEFT = (
    "the augmentation runs in the model now; what waits is the rest of __getitem__ (gathering each "
    "batch) and Keras handing it over: fewer, larger batches from the PyDataset, or its images moved to "
    "the device once and sliced there"
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


def _augment_edits(where: Where) -> FileEdits:
    """The PyDataset's call of its augmentation replaced by the image it is given, and the model
    put behind the layers that do the augmentation, before the script compiles it (compile then
    applies to the model that wraps it; the script's later uses of the name train and save that)."""
    work = main_fit(where.baseline).sample_work
    function = work.function if work else None
    if work is None or function is None:
        raise NotLocated("the function the PyDataset spends its time in was not seen")
    short = function.name.split(".")[-1]
    path, line = site(
        {"call": CallSite(file=work.file, line=function.call_line or 0)}, "call", where.root, f"called {short}"
    )
    text = original(path, where.originals)
    call = call_at(text, line, short)
    given = next((k.value for k in call.keywords if k.arg == function.argument), None)
    if given is None:
        index = _parameter_index(original(Path(function.file).resolve(), where.originals), function)
        if index is None or index >= len(call.args) or any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
            raise NotLocated(f"which argument of {short}(...) on line {line} is its {function.argument} cannot be read")
        given = call.args[index]
    starts = offsets(text)
    segment = ast.get_source_segment(text, given)
    if segment is None:
        raise NotLocated(f"the {function.argument} given to {short}(...) on line {line} cannot be read")
    call_edit = (
        at(text, starts, call.lineno, call.col_offset),
        at(text, starts, call.end_lineno, call.end_col_offset),
        segment,
        next(order),
    )
    out: dict[Path, list[Edit]] = {path: [call_edit]}
    for file, edits in model_behind_layers(where, function.layers, function.input_shape, f"{short}'s work"):
        out.setdefault(file, []).extend(edits)
    return list(out.items())


def model_behind_layers(
    where: Where, layers: list[AugmentLayer], input_shape: list[int] | None, what: str
) -> FileEdits:
    """The model put behind the layers that do the moved augmentation, before the script compiles
    it (compile then applies to the model that wraps it; the script's later uses of the name train
    and save that), with the definition of each of gpuscout's own layers among them."""
    model_path, compile_line = site(where.sites, "compile", where.root, "compiled the model")
    model_text = original(model_path, where.originals)
    compile_call = call_at(model_text, compile_line, "compile")
    if not (isinstance(compile_call.func, ast.Attribute) and isinstance(compile_call.func.value, ast.Name)):
        raise NotLocated("compile is not called on a model by name: the model cannot be wrapped before it")
    name = compile_call.func.value.id
    insert_after_imports(model_text, "", need_keras=True)  # raises where keras is not imported by that name
    code = f"{behind_layers(name, input_shape, layers)}  # {what}, on the device"
    edits = before_statement(model_text, compile_call, code)
    for layer in {layer.name for layer in layers if layer.own}:  # gpuscout's layer: its definition
        edits += insert_after_imports(model_text, definition(layer), need_keras=True, name=layer)
    return [(model_path, edits)]


def _parameter_index(text: str, function: SampleFunction) -> int | None:
    """The position of the function's image argument among those a call passes (a method's self,
    and a classmethod's cls, are not passed)."""
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == function.name.split(".")[-1]
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) <= function.line <= node.lineno
        ):
            names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
            static = any(name_of(d) == "staticmethod" for d in node.decorator_list)
            if function.owner and not static:
                names = names[1:]
            return names.index(function.argument) if function.argument in names else None
    return None


class AugmentInModel(ChangeKind):
    name = "augment_in_model"
    listed = 80
    rule = "a PyDataset whose __getitem__ spends its time in per-image work that Keras layers do"
    input_rank = 2
    input_left = PER_IMAGE_LEFT

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return augment_in_model(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        return _augment_edits(where)


KIND = AugmentInModel()
