"""A larger batch of in-memory arrays, as far as memory and the epoch let it grow, with the learning
rate scaled and warmed up for it (tune/changes/larger_batch.py): written as fit's batch_size and the rate
set after compile."""

from __future__ import annotations

import ast
from typing import Any

from gpuscout.analysis.repeats import definition
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, original, site
from gpuscout.tune.changes.larger_batch import larger_batches
from gpuscout.tune.source_edits import NotLocated, after_statement, call_at, insert_after_imports, set_keywords


def rate_edits(settings: dict[str, Any], where: Where) -> FileEdits:
    """The learning rate scaled for a larger batch, as the runs trained it: after the statement
    that compiled the model (the optimizer exists from there), on that model's optimizer."""
    factor = settings.get("learning_rate_factor")
    if not factor:
        return []
    path, line = site(where.sites, "compile", where.root, "compiled the model")
    text = original(path, where.originals)
    call = call_at(text, line, "compile")
    model = ast.get_source_segment(text, call.func.value) if isinstance(call.func, ast.Attribute) else None
    if not model:
        raise NotLocated("compile is not called on a model by name: where its optimizer is cannot be read")
    code = f"scaled_learning_rate({model}.optimizer, {factor:g}, warmup_steps={int(settings['warmup_steps'])})"
    return [
        (
            path,
            after_statement(text, call, code + "  # the rate for the larger batch")
            + insert_after_imports(text, definition("WarmedUpRate"), need_keras=True, name="WarmedUpRate")
            + insert_after_imports(
                text, definition("scaled_learning_rate"), need_keras=True, name="scaled_learning_rate"
            ),
        )
    ]


class BatchSize(ChangeKind):
    name = "batch_size"
    listed = 110
    work_rank = 1
    repeatable = True
    rule = "in-memory arrays, where twice and four times the batch fit in memory"

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return larger_batches(baseline, script_batch)

    def edits(self, change: Change, where: Where) -> FileEdits:
        path, line = site(where.sites, "fit", where.root, "called fit")
        text = original(path, where.originals)
        batch = {"batch_size": str(int(change.settings[self.name]))}
        return [
            (path, set_keywords(text, call_at(text, line, "fit"), batch)),
            *rate_edits(change.settings, where),
        ]


KIND = BatchSize()
