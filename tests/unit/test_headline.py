"""One headline (issue 87.3): a watched run's `samples_per_s` is its whole epochs' figure, the one
the terminal shows, in the record, its JSON, an export's CSV and MLflow; the windows' median is
`windows_samples_per_s`. Checked against figures worked out by hand."""

from __future__ import annotations

import csv
import io
import json

import pytest

from gpuscout.record import STORED
from gpuscout.report.exporters.as_csv import Csv
from gpuscout.report.watch import row
from gpuscout.tracking.fields import of_record
from tests.records import make_watch_record

BATCH, STEPS, WINDOW_S, VALIDATION_S = 64, 50, 1.0, 0.6


def three_epochs() -> list[dict]:
    """A fit of three epochs, each two 1.0 s windows of 50 steps of 64 samples (3,200 samples/s
    by the steps), then 0.6 s of validation before the next begins."""
    pid, start = 100, 1000.0
    events: list[dict] = [
        {"event": "watch_hooked", "pid": pid},
        {
            "event": "watch_fit",
            **{"pid": pid, "fit": 1, "backend": "jax", "keras_version": "3.15.1", "model": "m", "params": 1000},
            **{"input_type": "generator", "precision_policy": "float32", "compute_dtype": "float32"},
            **{"jit_compile": True, "steps_per_execution": 1, "strategy": None, "replicas": 1},
            **{"forward_flops": None, "flops_coverage": None, "batch_size": BATCH, "batch_bytes": None},
            **{"compile_s": 2.0, "started_monotonic_s": start - 2.0, "epochs": 3, "steps_per_epoch": 2 * STEPS},
        },
    ]
    index, at = 0, start
    for epoch in (1, 2, 3):
        begun = at
        for _ in range(2):
            events.append(
                {
                    "event": "watch_window",
                    **{"pid": pid, "fit": 1, "index": index, "start_monotonic_s": at},
                    **{"end_monotonic_s": at + WINDOW_S, "steps": STEPS, "samples": STEPS * BATCH},
                    **{"input_wait_s": 0.0, "outside_step_s": 0.0},
                }
            )
            index, at = index + 1, at + WINDOW_S
        events.append(
            {
                "event": "watch_epoch",
                **{"pid": pid, "fit": 1, "epoch": epoch, "start_monotonic_s": begun, "end_monotonic_s": at},
                **{"epoch_end_monotonic_s": at + VALIDATION_S, "steps": 2 * STEPS, "samples": 2 * STEPS * BATCH},
                "logs": {"loss": 0.5},
            }
        )
        at += VALIDATION_S
    events.append(
        {
            "event": "watch_fit_end",
            **{"pid": pid, "fit": 1, "steps": 6 * STEPS, "samples": 6 * STEPS * BATCH},
            **{"peak_memory_bytes": None, "stopped_by_limit": False},
        }
    )
    return events


# by hand: an epoch is 6,400 samples in 2 x 1.0 s + 0.6 s = 2.6 s, the first (its compile) left out
BY_EPOCHS = 2 * 6400 / (2 * 2.6)  # 2,461.5 samples/s
BY_STEPS = STEPS * BATCH / WINDOW_S  # 3,200 samples/s


def test_the_headline_is_the_whole_epochs_and_the_windows_keep_their_own_name():
    record = make_watch_record(events=three_epochs())
    assert record.clock is not None and record.clock.samples_per_s == pytest.approx(BY_EPOCHS)
    assert record.samples_per_s == pytest.approx(BY_EPOCHS)
    assert record.windows_samples_per_s == pytest.approx(BY_STEPS)
    document = json.loads(record.model_dump_json())
    assert document["samples_per_s"] == pytest.approx(BY_EPOCHS)  # watch --json, results export
    assert document["windows_samples_per_s"] == pytest.approx(BY_STEPS)
    assert row(record)[-1] == "2,461.5 samples/s"  # results list: the same figure
    (exported,) = csv.DictReader(io.StringIO(Csv().runs([record])))
    assert float(exported["samples_per_s"]) == pytest.approx(BY_EPOCHS)
    assert float(exported["windows_samples_per_s"]) == pytest.approx(BY_STEPS)


def test_mlflow_logs_the_headline_with_the_epochs_interval_and_the_windows_under_their_name():
    logged = of_record(make_watch_record(events=three_epochs()))
    assert logged.metrics["gpuscout/samples_per_s"] == pytest.approx(BY_EPOCHS)
    # two steady epochs of one rate: their bootstrap interval is that rate (not the windows')
    assert logged.metrics["gpuscout/samples_per_s_ci95_low"] == pytest.approx(BY_EPOCHS)
    assert logged.metrics["gpuscout/samples_per_s_ci95_high"] == pytest.approx(BY_EPOCHS)
    assert logged.metrics["gpuscout/windows_samples_per_s"] == pytest.approx(BY_STEPS)
    # each history ends on its figure: what MLflow's run table shows (issue 78)
    assert logged.series["gpuscout/samples_per_s"] == pytest.approx([BY_EPOCHS] * 3)
    assert logged.series["gpuscout/windows_samples_per_s"][-1] == pytest.approx(BY_STEPS)


def test_a_run_without_whole_epochs_is_headed_by_its_windows():
    record = make_watch_record()  # one epoch: no steady one after the first
    assert record.clock is None
    assert record.samples_per_s == record.windows_samples_per_s == pytest.approx(50 * 64 / 1.0)
    assert row(record)[-1] == "3,200.0 samples/s (steps)"


def test_a_record_stored_before_the_one_headline_is_read_as_one():
    """Stored before: `samples_per_s` held the windows' median beside the epochs. Read, the windows'
    figure moves to its own name and the headline is made from the stored epochs."""
    made = json.loads(make_watch_record(events=three_epochs()).model_dump_json())
    made["samples_per_s"] = made.pop("windows_samples_per_s")  # as it was stored
    old = STORED.validate_python(made)
    assert old.samples_per_s == pytest.approx(BY_EPOCHS)
    assert old.windows_samples_per_s == pytest.approx(BY_STEPS)
    # and once read, it stays as read: a second round trip changes nothing
    again = STORED.validate_json(old.model_dump_json())
    assert (again.samples_per_s, again.windows_samples_per_s) == (old.samples_per_s, old.windows_samples_per_s)
