"""Validation at a larger batch (fit's validation_batch_size), where validation is a large share of
the script's epoch: the same samples, the same metrics (Keras weights each batch's by its samples),
in fewer, larger forward passes. The training itself is untouched (issue 86: on an H100 a CNN
validated each epoch bought 1.25x by its own clock at a larger validation batch, by hand)."""

from __future__ import annotations

from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import call_at, set_keywords

# Validation this share of a steady epoch (the user's clock) or more is worth a run at a larger batch
VALIDATION_SHARE = 0.15
# The validation batch tried, over the training's: a forward pass keeps no activations for a
# backward one, so four times the batch holds in about the memory the training step already took
FACTOR = 4


def validation_batch(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if not main.validation:
        return "the script does not validate"
    if main.validation_batch_size:
        return f"already validation_batch_size={main.validation_batch_size}"
    if main.validation_input != "numpy":
        return (
            f"it validates on {main.validation_input or 'data not seen'}: fit batches only arrays at "
            "validation_batch_size (a dataset, a generator or a PyDataset makes its own batches)"
        )
    if main.validation_steps:
        return (
            f"fit's validation_steps ({main.validation_steps}) counts batches: larger ones would validate more samples"
        )
    if not main.batch_size:
        return "the training's batch was not seen"
    clock = r.clock
    seconds = sum(e.seconds for e in clock.steady) if clock else 0.0
    if not clock or seconds <= 0 or any(e.validation_s is None for e in clock.steady):
        return "validation's share of an epoch was not seen (no steady whole epoch)"
    share = sum(e.validation_s or 0.0 for e in clock.steady) / seconds
    if share < VALIDATION_SHARE:
        return f"validation takes {share:.0%} of an epoch: a larger batch there buys little"
    value = main.batch_size * FACTOR
    return [
        Change(
            f"validation_batch_x{FACTOR}",
            "validation_batch",
            {"validation_batch_size": value},
            f"model.fit(..., validation_batch_size={value})",
            f"validation takes {share:.0%} of an epoch, at the training's batch of {main.batch_size}",
        )
    ]


class ValidationBatch(ChangeKind):
    name = "validation_batch"
    listed = 130
    rule = f"validation {VALIDATION_SHARE:.0%} of an epoch or more, on arrays (fit's validation_batch_size, {FACTOR}x)"

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return validation_batch(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        path, line = site(where.sites, "fit", where.root, "called fit")
        text = original(path, where.originals)
        value = str(int(change.settings["validation_batch_size"]))
        return [(path, set_keywords(text, call_at(text, line, "fit"), {"validation_batch_size": value}))]


KIND = ValidationBatch()
