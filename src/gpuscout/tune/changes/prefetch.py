"""Reading ahead: a tf.data dataset's prefetch (and its options) tuned, a generator read on a
thread ahead of the loop."""

from __future__ import annotations

from gpuscout.analysis import repeats
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, wrapped_input


def prefetch(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.input_type not in ("tf.data", "generator"):
        return f"the input is {main.input_type}: prefetching applies to a tf.data dataset or a generator"
    reason = not_waiting(r)
    if reason:
        return reason
    helper = "tuned_pipeline" if main.input_type == "tf.data" else "read_ahead"
    line = (
        repeats.definition(helper)
        + f"\n\nmodel.fit({helper}({'dataset' if helper == 'tuned_pipeline' else 'batches'}), ...)"
    )
    return [
        Change(
            "prefetch",
            "prefetch",
            {"prefetch": True},
            line,
            f"{r.input_wait_share:.0%} of the time waiting for the next batch ({main.input_type})",
        )
    ]


class Prefetch(ChangeKind):
    name = "prefetch"
    listed = 60
    rule = "a tf.data dataset or a generator that keeps the loop waiting"
    input_rank = 4

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return prefetch(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        helper = "tuned_pipeline" if main_fit(where.baseline).input_type == "tf.data" else "read_ahead"
        return wrapped_input(where, helper, helper + "({})")


KIND = Prefetch()
