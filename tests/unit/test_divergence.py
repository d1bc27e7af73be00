"""Issue 59, item 1: a training whose loss went NaN or infinite is data. Where it went (the epoch, and
the steps of it between which), checked against a hand count of the windows; the verdict's finding
for each precision and optimizer; every value of fit's logs kept as it was, through the store, an
export and an import."""

from __future__ import annotations

import json
import math

import pytest

from gpuscout.analysis import divergence
from gpuscout.record.document import json_document
from gpuscout.store import Store
from gpuscout.store.documents import parse_document
from tests.records import fit_events, make_watch_record

NAN, INF = float("nan"), float("inf")


def epochs_events(
    losses: list[list[float | None]],
    epoch_logs: list[dict],
    *,
    steps: int = 10,
    policy: str = "float32",
    optimizer: str | None = "SGD",
    learning_rate: float | None = 0.5,
    planned: int | None = None,
) -> list[dict]:
    """A fit of len(losses) epochs; epoch e has a window per entry of losses[e], `steps` steps
    each, whose end read that loss (None: not read); its logs are epoch_logs[e]. The fit's first
    step (the compile) precedes the first window."""
    events = fit_events(windows=0, policy=policy)
    fit = events[1]
    fit.update(optimizer=optimizer, learning_rate=learning_rate, epochs=planned or len(losses))
    events = events[:2]
    clock, index = 1000.0, 0
    for number, (window_losses, logs) in enumerate(zip(losses, epoch_logs), 1):
        start = clock
        for loss in window_losses:
            events.append(
                {
                    "event": "watch_window",
                    "pid": 100,
                    "fit": 1,
                    "index": index,
                    "start_monotonic_s": clock,
                    "end_monotonic_s": clock + 1.0,
                    "steps": steps,
                    "samples": steps * 64,
                    "input_wait_s": 0.0,
                    "outside_step_s": 0.0,
                    "loss": loss,
                }
            )
            clock, index = clock + 1.0, index + 1
        if logs is not None:
            events.append(
                {
                    "event": "watch_epoch",
                    "pid": 100,
                    "fit": 1,
                    "epoch": number,
                    "start_monotonic_s": start,
                    "end_monotonic_s": clock,
                    "epoch_end_monotonic_s": clock + 0.1,
                    "steps": steps * len(window_losses),
                    "samples": steps * len(window_losses) * 64,
                    "logs": logs,
                }
            )
        clock += 0.2
    return events


def test_the_first_window_that_read_nan_places_the_bad_step_in_its_epoch():
    # epoch 1: 2 windows (the compile's step + 20), epoch 2: finite at its step 10, NaN at 20, 30
    events = epochs_events(
        [[2.0, 1.5], [1.2, NAN, NAN]], [{"loss": 1.5, "val_loss": 1.6}, {"loss": NAN, "val_loss": NAN}]
    )
    fit = make_watch_record(events=events).main
    d = fit.diverged
    assert (d.metric, d.value, d.epoch, d.first_step, d.last_step) == ("loss", "NaN", 2, 11, 20)
    assert d.last_finite == 1.2 and d.last_finite_step == 10
    assert divergence.where(d) == "in epoch 2, at a step between 11 and 20"


def test_nan_from_the_first_window_includes_the_compile_step_and_an_unfinished_epoch_is_the_next():
    first = make_watch_record(events=epochs_events([[INF, INF]], [{"loss": INF}])).main.diverged
    assert (first.value, first.epoch, first.first_step, first.last_step, first.last_finite) == ("inf", 1, 1, 11, None)
    # epoch 1 ended finite; epoch 2 was running when the run stopped (--steps): no epoch event for it
    unfinished = make_watch_record(events=epochs_events([[1.0], [0.9, -INF]], [{"loss": 1.0}, None], planned=5))
    d = unfinished.main.diverged
    assert (d.value, d.epoch, d.first_step, d.last_step, d.last_finite_step) == ("-inf", 2, 11, 20, 10)


def test_without_window_losses_the_epoch_logs_say_where_and_a_metric_alone_is_no_divergence():
    # a record of the instrumentation before window losses: epochs only
    events = epochs_events(
        [[None], [None], [None]],
        [{"loss": 0.5, "val_loss": 0.6}, {"loss": 0.4, "val_loss": 0.5}, {"loss": 0.3, "val_loss": NAN}],
    )
    d = make_watch_record(events=events).main.diverged
    assert (d.metric, d.epoch, d.first_step, d.last_finite) == ("val_loss", 3, None, 0.5)
    cause = divergence.cause(make_watch_record(events=events).main)
    assert "only val_loss went NaN: the validation data" in cause.fix
    auc_only = epochs_events([[0.5]], [{"loss": 0.5, "auc": NAN}])
    r = make_watch_record(events=auc_only)
    assert r.main.diverged is None and "loss_not_finite" not in [c.code for c in r.verdict]
    assert math.isnan(r.main.epochs[0].logs["auc"])  # kept as it was


@pytest.mark.parametrize(
    "policy, optimizer, said",
    [
        (
            "mixed_float16",
            "Adam",
            "Adam is not a LossScaleOptimizer: set the mixed_float16 policy before model.compile",
        ),
        ("mixed_float16", "LossScaleOptimizer(Adam)", "the loss is scaled (LossScaleOptimizer)"),
        ("mixed_bfloat16", "AdamW", "bfloat16 keeps 8 bits of mantissa"),
        ("float32", "SGD", "lower SGD's learning rate (0.5 then)"),
    ],
)
def test_the_finding_comes_first_with_the_checks_for_its_precision_and_optimizer(policy, optimizer, said):
    events = epochs_events([[1.0, NAN]], [{"loss": NAN}], policy=policy, optimizer=optimizer)
    r = make_watch_record(events=events)
    first = r.verdict[0]
    assert first.code == "loss_not_finite" and len(r.verdict) > 1  # the speed causes follow it
    assert first.message.startswith("the loss went NaN in epoch 1, at a step between 12 and 21:")
    assert "loss 1 at step 11, then NaN" in first.evidence and f"optimizer {optimizer}" in first.evidence
    assert said in first.fix
    inner = optimizer.split("(")[-1].rstrip(")")
    assert f"keras.optimizers.{inner}(learning_rate=0.05, clipnorm=1.0)" in first.code_snippet  # a tenth of 0.5
    assert "TerminateOnNaN" in first.code_snippet


def test_every_value_of_the_logs_is_stored_exported_and_imported_as_it_was(tmp_path):
    logs = {
        "loss": NAN,
        "val_loss": INF,
        "per_class": [0.5, NAN, 1.0],
        "matrix": [[1.0, 2.0], [3.0, -INF]],
        "note": "warm-up",
        "count": 3,
    }
    r = make_watch_record(events=epochs_events([[NAN]], [logs]))
    kept = r.main.epochs[0].logs
    assert kept["count"] == 3.0 and kept["note"] == "warm-up" and kept["matrix"][1][1] == -INF
    with Store(tmp_path / "a.sqlite") as store:
        store.put_many([r])
        text = json_document(store.list(kind="watch"))
    assert '"loss": NaN' in text and '"val_loss": Infinity' in text
    back = parse_document(text, "export.json")[0]
    with Store(tmp_path / "b.sqlite") as store:
        assert store.put_many([back]) == 1
        again = store.list(kind="watch")[0]
    got = again.main.epochs[0].logs
    assert math.isnan(got["loss"]) and got["val_loss"] == INF and math.isnan(got["per_class"][1])
    assert got["note"] == "warm-up" and again.main.diverged == r.main.diverged
    # NaN is read back only where the record keeps readings: a throughput of NaN stays refused
    doc = json.loads(text, parse_constant=float)
    doc["runs"][0]["samples_per_s"] = NAN
    with pytest.raises(Exception, match="samples_per_s: Input should be a finite number"):
        parse_document(json.dumps(doc), "bad.json")


def test_a_learning_rate_a_schedule_raised_is_the_one_said_and_its_rise_the_first_check():
    """The H200 drill's case: a LearningRateScheduler set 1e4 from the fifth epoch. Keras logs the
    rate each epoch; the finding names the rate of the epoch that went bad, not the one fit began with."""
    logs = [
        {"loss": 2.0, "learning_rate": 1e-3},
        {"loss": 1.5, "learning_rate": 1e-3},
        {"loss": NAN, "learning_rate": 1e4},
    ]
    events = epochs_events([[2.0], [1.5], [NAN]], logs, optimizer="AdamW", learning_rate=1e-3)
    cause = make_watch_record(events=events).verdict[0]
    assert cause.message.startswith("the loss went NaN in epoch 3, at a step between 1 and 10:")
    assert "learning rate 10000 in that epoch (it began at 0.001: a schedule or a callback set it)" in cause.evidence
    assert cause.fix.startswith("the learning rate rose from 0.001 to 10000 by that epoch: look at the schedule")
    assert "AdamW(learning_rate=1000, clipnorm=1.0)" in cause.code_snippet
