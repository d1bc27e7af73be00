"""The batches a PyDataset or a generator makes again each epoch, kept once made (hashed: the same
batches), or a tf.data map's output cached where the script wrote it."""

from __future__ import annotations

from gpuscout.analysis import repeats
from gpuscout.record.watch import CallSite, WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site, wrapped_input
from gpuscout.tune.source_edits import at, call_at, offsets, order


def cache(r: WatchRecord) -> list[Change] | str:
    reason = not_waiting(r)
    keep = repeats.keepable(main_fit(r), r.env.host_memory_bytes)
    if reason:
        return reason
    if isinstance(keep, str):
        return keep
    # the steps it fills in, judged after them (judging.fill_steps): a generator's period, else an epoch
    seen = main_fit(r).input_repeats
    fill = (
        keep.period
        or (seen.batches if seen and seen.order == "epoch" else None)
        or main_fit(r).steps_per_epoch
        or next((e.steps for e in main_fit(r).epochs), None)
    )
    settings = {
        "cache": True,
        **({"period": keep.period} if keep.period else {}),
        **({"cache_at": keep.at} if keep.at else {}),
        **({"fill_steps": fill} if fill else {}),
    }
    return [
        Change(
            "cache",
            "cache",
            settings,
            repeats.cache_code(keep),
            f"{keep.evidence}, and the loop waited {r.input_wait_share:.0%} of the time",
        )
    ]


class Cache(ChangeKind):
    name = "cache"
    listed = 50
    rule = "a PyDataset or generator that keeps the loop waiting and makes the same batches again (hashed)"
    input_rank = 0
    input_left = (  # nothing is made any more: what waits is handing kept batches over
        "the batches are kept; what is left is Keras handing each over: fewer, larger steps (a larger "
        "batch) or the input moved to the device once"
    )

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return cache(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        """A tf.data map's `.cache()` where the script wrote the map; else fit's input wrapped in the
        helper the runs used (CachedBatches for a PyDataset, replayed for a generator)."""
        settings = change.settings
        if settings.get("cache_at"):
            file, _, line = settings["cache_at"].rpartition(":")
            path, line = site({"map": CallSite(file=file, line=int(line))}, "map", where.root, "mapped its dataset")
            text = original(path, where.originals)
            call = call_at(text, line, "map")
            end = at(text, offsets(text), call.end_lineno, call.end_col_offset)
            return [(path, [(end, end, ".cache()", next(order))])]
        if main_fit(where.baseline).input_type == "PyDataset":
            return wrapped_input(where, "CachedBatches", "CachedBatches({})", need_keras=True)
        return wrapped_input(where, "replayed", "replayed({}, period=" + str(int(settings["period"])) + ")")


KIND = Cache()
