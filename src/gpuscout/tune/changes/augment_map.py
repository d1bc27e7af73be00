"""The augmentation a tf.data `map` does on the host, moved into the model (issue 77, its third
form: the TensorFlow guides' own, `ds.map(augment)` with tf.image's random flip and crop).

tf.data runs the map's function element by element on the host's cores; the flips, crops, shifts
and rescales it does are, as Keras layers, a few batched operations inside the compiled step on
the device. The baseline's probe (child/map_augment.py) called the map's function again on one
element of its input and told what it did to the image as those layers, the rest of the element
(its label) coming back as given. The change builds the pipeline without that map, where the
script wrote it, and trains `keras.Sequential([Input, *layers, model])` (augment_in_model's
wrapper): what the patch writes too, the `.map(...)` call taken out of the chain.

Validation data fit is also given is read by the same model: where its pipeline has its own map
(not the moved one) and the layers rescale or crop, the model would rescale or crop it a second
time, so nothing is moved and the reason says so; flips and shifts are training-only layers."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from gpuscout.record.augment import AugmentLayer, MapAugment, behind_layers
from gpuscout.record.watch import PipelineOp, WatchedFit, WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.augment_in_model import describe, model_behind_layers
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original
from gpuscout.tune.source_edits import Edit, NotLocated, at, call_at, offsets, order

# Layers that change what the model sees at inference too (a validation batch): values and sizes.
# RandomFlip and a shift (RandomCropEach padded back to the image's size) pass it through.
INFERENCE_TOO = ("Rescaling", "Normalization", "CenterCrop")


def augment_map(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.input_type != "tf.data":
        return f"the input is {main.input_type}, not a tf.data pipeline"
    reason = not_waiting(r)
    if reason:
        return reason
    maps = [op for op in main.pipeline if op.op == "map"]
    if not maps:
        return "the pipeline has no map of the script's own"
    random = [op for op in maps if op.repeats is False]
    if not random:
        return "no map of the script's makes different elements each pass (a random augmentation)"
    told = [(op, op.augment) for op in random if op.augment is not None]
    if not told:
        return (
            f"whether the map at {_where(random[0])} can move into the model is told when tune runs the script "
            "(its first baseline calls the map's function again)"
        )
    movable = [(op, a) for op, a in told if a.layers and not a.why_not]
    if not movable:
        op, a = told[0]
        return f"the map at {_where(op)} ({a.function}) cannot be moved as layers: {a.why_not or 'nothing was told'}"
    op, found = movable[0]
    if main.own_train_step:
        return "the model defines its own train_step: a model around it would train with Keras' step"
    why_validation = _validation_differs(main, op, found.layers)
    if why_validation:
        return why_validation
    line = (
        f"{behind_layers('model', found.input_shape, found.layers)}  # before compile\n"
        f"# and the .map({found.function}) at {_where(op)} left out of the pipeline"
    )
    settings = {
        "augment_map": {
            "at": op.at,
            "function": found.function,
            "input_shape": found.input_shape,
            "layers": [layer.model_dump() for layer in found.layers],
        }
    }
    why = (
        f"the map at {_where(op)} ({found.function}) runs on the host for each element, and the loop waited "
        f"{r.input_wait_share or 0:.0%}; each of {found.explained} images it made was the one it was given "
        f"({found.input_dtype}) {describe(found.layers)}"
    )
    return [Change("augment_map", "augment_map", settings, line, why)]


def _where(op: PipelineOp) -> str:
    return f"{os.path.basename(op.file)}:{op.line}"


def _validation_differs(main: WatchedFit, op: PipelineOp, layers: list[AugmentLayer]) -> str | None:
    """Why the validation data would be read otherwise by the model behind `layers`, or None."""
    if not main.validation or op.at in main.validation_maps:
        return None  # no validation, or made through the same map: left out of it too
    changes = [layer.name for layer in layers if layer.name in INFERENCE_TOO]
    if layers and any(layer.name == "RandomCropEach" and not layer.kwargs.get("pad_height") for layer in layers):
        changes.append("RandomCropEach (a smaller crop)")
    if not changes:
        return None
    own = f" (its own: {', '.join(main.validation_maps)})" if main.validation_maps else ""
    return (
        f"fit validates on data made without the map at {_where(op)}{own}, and the model behind "
        f"{', '.join(changes)} would change it too: move the map's work into the model by hand, and take what "
        "those layers do out of the validation pipeline"
    )


def _map_edits(change: Change, where: Where) -> FileEdits:
    """The `.map(...)` call at its line taken out of the chain (its receiver kept), and the model
    put behind the layers before the script's compile."""
    main = main_fit(where.baseline)
    at_site = change.settings["augment_map"]["at"]
    op = next((o for o in main.pipeline if o.op == "map" and o.at == at_site), None)
    found: MapAugment | None = op.augment if op is not None else None
    if op is None or found is None or not found.layers:
        raise NotLocated(f"the map at {at_site} was not seen in the baseline's pipeline")
    file = Path(op.file).resolve()
    if not file.is_file() or where.root not in file.parents:
        raise NotLocated(f"{op.file} is outside the script's folder {where.root}")
    text = original(file, where.originals)
    call = call_at(text, op.line, "map")
    if not isinstance(call.func, ast.Attribute):
        raise NotLocated(f"map(...) on line {op.line} is not called on a dataset")
    starts = offsets(text)
    receiver = call.func.value
    edits: list[Edit] = [
        (
            at(text, starts, receiver.end_lineno, receiver.end_col_offset),
            at(text, starts, call.end_lineno, call.end_col_offset),
            "",
            next(order),
        )
    ]
    out: dict[Path, list[Edit]] = {file: edits}
    for other, more in model_behind_layers(where, found.layers, found.input_shape, "the map's augmentation"):
        out.setdefault(other, []).extend(more)
    return list(out.items())


class AugmentMap(ChangeKind):
    name = "augment_map"
    listed = 100
    rule = "a tf.data map that crops, flips, shifts or rescales each image at random on the host"
    input_rank = 2  # beside the other augmentation moves: the work removed before it is spread over workers
    input_left = (  # the map's per-element work is on the device now
        "the map's augmentation runs in the model now; what waits is the rest of the pipeline: its other "
        "maps in parallel (num_parallel_calls=tf.data.AUTOTUNE), a cache() of what repeats, prefetch"
    )

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return augment_map(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        return _map_edits(change, where)


KIND = AugmentMap()
