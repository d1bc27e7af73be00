"""In-memory arrays given to fit on jax moved to the GPU once, each epoch's order gathered there and
fit's batches sliced from it (child/fixes.py device_slices), reshuffled each epoch as fit does."""

from __future__ import annotations

import ast

from gpuscout.analysis import repeats
from gpuscout.analysis.repeats import definition
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import (
    NotLocated,
    call_at,
    drop_keywords,
    ensure_import,
    insert_after_imports,
    own_name,
    replace_arrays,
    set_keywords,
)

# What the arrays and their reshuffled copy (fixes.device_slices) may take of the GPU's memory: the
# rest is the model's, its optimizer's and the step's activations.
DEVICE_SHARE = 0.25


def device_batches(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.backend != "jax" or main.input_type not in ("numpy", "jax array"):
        return f"for in-memory arrays on jax (here: {main.input_type} on {main.backend})"
    if r.gpu is None:
        return "no GPU: on a CPU the arrays already are where the step runs"
    if main.weighted:
        return "fit weighs its samples (sample_weight or class_weight), which device slices do not carry"
    b = main.batch_size or 32
    held = 2 * (main.batch_bytes or 0) * (next((e.steps for e in main.epochs), None) or main.steps_per_epoch or 0)
    memory = r.gpu.memory_total_bytes
    if memory and held > DEVICE_SHARE * memory:
        return (
            f"the arrays and the epoch's reshuffled copy of them take {repeats.gib(held)}, more than "
            f"{DEVICE_SHARE:.0%} of the GPU's {repeats.gib(memory)}"
        )
    shuffle = "" if main.shuffle is None else f", shuffle={main.shuffle!r}"
    return [
        Change(
            "device_batches",
            "device_batches",
            {"device_batches": True},
            repeats.definition("device_slices") + f"\n\nmodel.fit(device_slices(x, y, {b}{shuffle}), "
            f"steps_per_epoch=math.ceil(len(x) / {b}), ...)   # instead of model.fit(x, y, batch_size={b}, ...)",
            f"fit(x, y) on jax gathers each batch of {main.batch_size} on the host and copies it to the GPU; "
            "the slices are fit's batches, reshuffled each epoch as fit does",
        )
    ]


def _device_batches_edits(where: Where) -> FileEdits:
    """fit(x, y, batch_size=B, shuffle=S, ...) as fit(device_slices(x, y, B, shuffle=S),
    steps_per_epoch=math.ceil(len(x) / B), ...): what tune ran (child/tune_overrides.py
    device_batches), the batches and their shuffle fit's own."""
    path, line = site(where.sites, "fit", where.root, "called fit")
    text = original(path, where.originals)
    call = call_at(text, line, "fit")
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords:
        raise NotLocated("fit is given **kwargs: its x, y and batch_size cannot be read from the source")
    for weighed in ("sample_weight", "class_weight", "validation_split"):
        if weighed in keywords:
            raise NotLocated(f"fit is given {weighed}, which device slices do not carry")
    batch = (ast.get_source_segment(text, keywords["batch_size"]) if "batch_size" in keywords else None) or "32"
    shuffle = keywords.get("shuffle")
    given = "" if shuffle is None else f", shuffle={ast.get_source_segment(text, shuffle)}"
    named, code = own_name(text, "device_slices", definition("device_slices"))
    x = call.args[0] if call.args else keywords.get("x")
    if x is None:
        raise NotLocated("fit is given no x that the source shows")
    edits = replace_arrays(text, call, f"{named}({{x}}, {{y}}, {batch}{given})")
    edits += drop_keywords(text, call, {"batch_size", "shuffle"})
    added = {}
    if "steps_per_epoch" not in keywords:
        added["steps_per_epoch"] = f"math.ceil(len({ast.get_source_segment(text, x)}) / {batch})"
        edits += ensure_import(text, "math")
    if "validation_data" in keywords and "validation_batch_size" not in keywords:
        added["validation_batch_size"] = batch  # fit validated at batch_size, which the slices take over
    if added:
        edits += set_keywords(text, call, added)
    edits += insert_after_imports(text, code, need_keras=False, name=named)
    return [(path, edits)]


class DeviceBatches(ChangeKind):
    name = "device_batches"
    listed = 70
    work_rank = 3
    rule = "in-memory arrays given to fit on jax, on a GPU: moved to it once, fed in device slices"
    input_rank = 1

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return device_batches(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        return _device_batches_edits(where)


KIND = DeviceBatches()
