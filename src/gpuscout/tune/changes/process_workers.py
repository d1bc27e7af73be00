"""Worker processes for a PyDataset, each a new interpreter (child/spawned_workers.py): its
batches made outside the GIL, in parallel, where Keras' own `use_multiprocessing=True` forks the
training process, which hangs or crawls once JAX or TensorFlow has started (keras#18431, #20619;
8 forked workers ran 0.08x of one thread on an H200 host, issue 77). The training is the same:
Keras asks for the same batches in the same order (its shuffle), and the dataset's state after
each epoch's end is sent to the processes."""

from __future__ import annotations

from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, wrapped_input
from gpuscout.tune.changes.workers import waiting_pydataset, wanted

HELPER = "SpawnedWorkers"


def process_workers(r: WatchRecord) -> list[Change] | str:
    reason = waiting_pydataset(r)
    if reason:
        return reason
    main = main_fit(r)
    count = max(2, wanted(r))  # one process is a thread's pace plus the hand-over
    return [
        Change(
            f"process_workers_{count}",
            "process_workers",
            {"process_workers": count},
            # the class is 200 lines (the patch writes it): named here, not printed
            f"model.fit({HELPER}(dataset, workers={count}), ...)   # {HELPER}: the class --patch adds "
            "(gpuscout/child/spawned_workers.py)",
            f"{r.input_wait_share:.0%} of the time waiting for the next batch, {main.input_workers or 1} "
            "worker(s) sharing one interpreter's GIL",
        )
    ]


class ProcessWorkers(ChangeKind):
    name = "process_workers"
    listed = 40
    rule = "a PyDataset that keeps the loop waiting: its batches made in new interpreters, never forked"
    input_rank = 3  # beside workers: threads and processes are two ways to the same producers
    input_left = (  # made outside the GIL now: what waits is their pace and the hand-over
        "the PyDataset's batches are made in worker processes; what waits is their pace (more of them, "
        "where the host has idle cores) and handing each batch over: the per-sample work moved into the "
        "model (Keras preprocessing layers, on the device), or fewer, larger batches"
    )
    outside_gil = True
    replaces = ("workers",)  # the dataset's own threads do nothing once processes make its batches

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return process_workers(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        count = change.settings["process_workers"]
        return wrapped_input(where, HELPER, HELPER + "({}, workers=" + str(count) + ")", need_keras=True)


KIND = ProcessWorkers()
