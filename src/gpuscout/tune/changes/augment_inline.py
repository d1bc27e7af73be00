"""The augmentation a PyDataset's `__getitem__` writes in its own lines, moved into the model
(issue 77): the form most scripts are written in, a loop over the batch that crops, flips and
normalises each image in numpy, with no function of its own for augment_in_model to move.

The baseline's probe (child/inline_augment.py) found the array `__getitem__` reads its images
from and the indices it reads them by, rewrote `__getitem__` from its source to hand them as
read (the statements that made the images left out, every other line as the script wrote it),
checked that it then returns the same labels, and told what the left-out lines did as layers.
The change trains `keras.Sequential([Input, *layers, model])` (augment_in_model's wrapper) on the
images as read: uint8 where the script stores them so, a quarter of the bytes to the device."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from gpuscout.core.getitem_rewrite import function_at, rewrite
from gpuscout.record.augment import SAMPLE_WORK_SHARE, InlineAugment, behind_layers
from gpuscout.record.watch import WatchedFit, WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.augment_in_model import PER_IMAGE_LEFT, describe, hot_lines, model_behind_layers
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original
from gpuscout.tune.source_edits import Edit, NotLocated, at, offsets, order


def augment_inline(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.input_type not in ("PyDataset", "generator"):
        return f"the input is {main.input_type}, not a PyDataset or a generator"
    reason = not_waiting(r)
    if reason:
        return reason
    inline = told(main)
    if main.input_type == "generator":
        where = "the generator's loop makes each batch on the host"
        if inline is None:
            return (
                "whether the generator's loop can move into the model is told when tune runs the script (its "
                "first baseline makes its batches again)"
            )
    else:
        work = main.sample_work
        if work is None:
            return (
                "where the PyDataset's __getitem__ spends its time was not seen (not the script's own, or a tracer on)"
            )
        function = work.function
        if function is not None and function.share >= SAMPLE_WORK_SHARE:
            return (
                f"{function.name} takes {function.share:.0%} of __getitem__: augment_in_model moves a function's work"
            )
        where = f"in __getitem__, {hot_lines(work)}"
        if inline is None:
            return (
                f"__getitem__'s own lines take its time ({hot_lines(work)}): whether they can move into the model is "
                "told when tune runs the script (its first baseline calls __getitem__ again)"
            )
    if inline.why_not or not inline.layers:
        return f"{where}, and cannot be moved as layers: {inline.why_not or 'nothing was told'}"
    if main.own_train_step:
        return "the model defines its own train_step: a model around it would train with Keras' step"
    hands = "the generator yields" if inline.generator else "__getitem__ returns"
    line = (
        f"{behind_layers('model', inline.input_shape, inline.layers)}  # before compile\n"
        f"# and {hands} {inline.images}[{inline.indices}]: {_lines(inline)} left out"
    )
    settings = {
        "augment_inline": {
            "file": inline.file,
            "line": inline.line,
            "images": inline.images,
            "indices": inline.indices,
            "input_shape": inline.input_shape,
            "layers": [layer.model_dump() for layer in inline.layers],
            **({"generator": True} if inline.generator else {}),
        }
    }
    why = (
        f"{where}, and the loop waited {r.input_wait_share or 0:.0%}; each of {inline.explained} images it made "
        f"was the one it read from {inline.images} ({inline.input_dtype}) {describe(inline.layers)}"
    )
    return [Change("augment_inline", "augment_inline", settings, line, why)]


def told(main: WatchedFit) -> InlineAugment | None:
    """What the probe told of the input's own loop: a generator's, or a PyDataset's __getitem__'s."""
    if main.input_type == "generator":
        return main.generator_inline
    return main.sample_work.inline if main.sample_work else None


def _lines(inline: InlineAugment) -> str:
    name = os.path.basename(inline.file or "")
    spans = [f"{a}" if a == b else f"{a}-{b}" for a, b in inline.removed]
    return f"{name} line{'s' if len(spans) > 1 or '-' in ''.join(spans) else ''} {', '.join(spans)}"


def _inline_edits(where: Where) -> FileEdits:
    """__getitem__ rewritten as the probe rewrote it (the same function, core/getitem_rewrite.py, on
    the file's original text: the lines left out, the return's images replaced), and the model
    put behind the layers before the script's compile."""
    inline = told(main_fit(where.baseline))
    if inline is None or inline.file is None or inline.line is None or not inline.layers:
        raise NotLocated("where the input reads its images was not seen")
    path = Path(inline.file).resolve()
    if not path.is_file() or where.root not in path.parents:
        raise NotLocated(f"{inline.file} is outside the script's folder {where.root}")
    text = original(path, where.originals)
    lines = text.splitlines(keepends=True)
    function = function_at(ast.parse(text), inline.line)
    if function is None:
        raise NotLocated(f"no function is defined at {path.name}:{inline.line}")
    images = f"{inline.images}[{inline.indices}]"
    found = rewrite(function, images, lines, 1)
    if isinstance(found, str):
        raise NotLocated(found)
    if [list(r) for r in found.removed] != inline.removed:
        raise NotLocated(f"{path.name} changed since tune read it: its lines are not those it measured")
    starts = offsets(text)
    line, col, end_line, end_col = found.replaced
    edits: list[Edit] = [(at(text, starts, line, col), at(text, starts, end_line, end_col), found.text, next(order))]
    for first, last in found.removed:
        edits.append((starts[first - 1], starts[last], "", next(order)))
    out: dict[Path, list[Edit]] = {path: edits}
    what = "the generator's augmentation" if inline.generator else "__getitem__'s augmentation"
    for file, more in model_behind_layers(where, inline.layers, inline.input_shape, what):
        out.setdefault(file, []).extend(more)
    return list(out.items())


class AugmentInline(ChangeKind):
    name = "augment_inline"
    listed = 90
    rule = "a PyDataset's __getitem__, or a generator, that crops, flips, shifts or rescales each image in its own loop"
    input_rank = 2  # beside augment_in_model: the work removed before it is spread over workers
    input_left = PER_IMAGE_LEFT

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return augment_inline(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        return _inline_edits(where)


KIND = AugmentInline()
