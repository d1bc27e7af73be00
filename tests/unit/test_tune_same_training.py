"""Issue 74: a tune change buys speed, never another training. The user's clock (analysis/
epoch_clock.py) checked against a hand computation; which steps_per_execution values tile an epoch
(tune/changes/steps_per_execution.tiling); and how a candidate trains otherwise than its reference (tune/
same_training.py), on records made by hand. tests/integration/test_cli_tune_same_training.py
checks the same on real Keras runs."""

import pytest

from gpuscout.analysis import epoch_clock
from gpuscout.record.watch import WatchedFit
from gpuscout.tune import same_training
from gpuscout.tune.changes import steps_per_execution
from tests.records import fit_events, make_watch_record

# Three epochs of a fit, by hand: (start, training's end, epoch's end with validation), 40 steps
# of 64 samples each, validated on 10 batches
EPOCHS = [(100.0, 101.0, 101.5), (101.6, 102.2, 102.6), (102.7, 103.3, 103.7)]


def fit_with(epochs=EPOCHS, steps=40, batch=64, validation=10, marks=("a", "b", "c"), **fields) -> WatchedFit:
    made = [
        {
            "epoch": i + 1,
            "start_monotonic_s": start,
            "end_monotonic_s": end,
            "epoch_end_monotonic_s": done,
            "steps": steps,
            "samples": steps * batch,
            "samples_per_s": 1.0,
            "validation_steps": validation,
            "first_batch": marks[i] if marks else None,
        }
        for i, (start, end, done) in enumerate(epochs)
    ]
    return WatchedFit(pid=1, index=1, batch_size=batch, epochs=made, **fields)


def test_the_clock_is_the_wall_time_from_one_epoch_s_end_to_the_next():
    clock = epoch_clock.epoch_clock(fit_with())
    # the first epoch (its compile) apart: 101.5 - 100.0 = 1.5 s
    assert [e.seconds for e in clock.first] == [1.5]
    # epoch 2: 101.5 -> 102.6 = 1.1 s: 0.1 s between (101.5 -> 101.6), 0.6 s of steps, 0.4 s after them
    two, three = clock.steady
    assert two.seconds == pytest.approx(1.1) and two.between_s == pytest.approx(0.1)
    assert two.training_s == pytest.approx(0.6) and two.after_s == pytest.approx(0.4)
    assert three.seconds == pytest.approx(1.1)
    # 2 x 2,560 samples over 2.2 s
    assert clock.samples_per_s == pytest.approx(5120 / 2.2)
    assert clock.epoch_s == pytest.approx(1.1)
    assert clock.share("after_s") == pytest.approx(0.8 / 2.2) and clock.share("training_s") == pytest.approx(1.2 / 2.2)
    # the script's 10 epochs: the first as it ran, nine at 1.1 s
    assert epoch_clock.whole_fit_s(clock, 10) == pytest.approx(1.5 + 9 * 1.1)
    assert epoch_clock.whole_fit_s(clock, None) is None
    # two steady epochs of one rate: an interval of that rate
    low, high = epoch_clock.rate_ci95(clock)
    assert low == pytest.approx(5120 / 2.2) and high == pytest.approx(5120 / 2.2)
    # a cache that fills over two epochs: those two are its start
    assert [e.epoch for e in epoch_clock.epoch_clock(fit_with(), skip=2).steady] == [3]
    assert epoch_clock.epoch_clock(fit_with(), skip=3) is None


def test_epochs_whose_samples_were_not_counted_are_read_by_steps_times_the_batch_or_not_at_all():
    """A tf.data batch of an open shape read inside a compiled loop of several steps counts no
    samples (0): its epochs are steps x the fit's batch, else the reference's; with neither the
    clock is None (judged by its windows), never 0 samples/s (steps_per_execution 32 judged 1.80x
    by its steps was called 0.00x, slower, on the TensorFlow CPU, 2026-12-02)."""
    uncounted = fit_with()
    uncounted.batch_size = None
    for epoch in uncounted.epochs:
        epoch.samples = 0
    assert epoch_clock.epoch_clock(uncounted) is None
    clock = epoch_clock.epoch_clock(uncounted, batch=64)  # 40 steps of 64 over 1.1 s, twice
    assert clock.samples_per_s == pytest.approx(2 * 40 * 64 / 2.2)
    uncounted.batch_size = 32  # the fit's own batch first
    assert epoch_clock.epoch_clock(uncounted, batch=64).samples_per_s == pytest.approx(2 * 40 * 32 / 2.2)


@pytest.mark.parametrize(
    ("epoch", "validation", "values"),
    [
        (40, None, [8, 20]),  # issue 74's generator: 32 would train 64 steps an epoch
        (64, None, [8, 32]),
        (40, 10, [5, 10]),  # both the epoch and validation_steps tiled
        (1000, None, [8, 25]),
        (37, None, [37]),  # a prime: one call an epoch
        (None, None, [8, 32]),  # read to its end: any value ends with it
    ],
)
def test_steps_per_execution_values_tile_the_epoch(epoch, validation, values):
    main = fit_with(epochs=[], steps_per_epoch=epoch, validation_steps=validation)
    assert steps_per_execution.tiling(main)[0] == values


def test_no_value_tiles_an_epoch_of_a_large_prime():
    reason = steps_per_execution.tiling(fit_with(epochs=[], steps_per_epoch=97))
    assert reason == (
        "no steps_per_execution from 2 to 64 divides the epoch's 97 steps: any would change the steps an epoch "
        "trains (Keras runs whole calls of it)"
    )


def record_of(fit: WatchedFit):
    made = make_watch_record(events=fit_events())
    return made.model_copy(update={"fits": [fit]})


def test_more_steps_an_epoch_is_another_training():
    script_run = record_of(fit_with())
    more = record_of(fit_with(steps=64))  # steps_per_execution 32 on 40 steps an epoch
    assert same_training.differences([more], [script_run]) == [
        "trains 64 steps an epoch where the script trains 40",
        "sees 4,096 samples an epoch where the script sees 2,560",
    ]
    assert same_training.differences([record_of(fit_with())], [script_run]) == []


def test_a_larger_batch_declares_its_steps_and_is_held_to_its_samples():
    script_run = record_of(fit_with())
    # batch 256 at 10 steps: the same 2,560 samples; declared, so not another training, and fit
    # validates at its batch_size: 3 validation batches where the script's 64 took 10 (an H200's MLP
    # at x64 was refused for "validates on 8 batches" before)
    bigger = record_of(fit_with(steps=10, batch=256, validation=3))
    assert same_training.differences([bigger], [script_run], same_training.Declared(batch=256)) == []
    # ... but 8 steps of 256 (2,048 samples) see fewer samples
    fewer = record_of(fit_with(steps=8, batch=256))
    assert same_training.differences([fewer], [script_run], same_training.Declared(batch=256)) == [
        "sees 2,048 samples an epoch where the script sees 2,560"
    ]


def test_validation_shuffle_content_and_optimizer():
    script_runs = [record_of(fit_with(optimizer="Adam", learning_rate=1e-3, input_type="numpy")) for _ in range(2)]
    assert same_training.differences([record_of(fit_with(validation=32))], script_runs) == [
        "validates on 32 batches an epoch where the script validates on 10"
    ]
    # the script's epochs begin with other batches (fit's shuffle); a change whose don't
    assert same_training.differences([record_of(fit_with(marks=("a", "a", "a")))], script_runs) == [
        "feeds its batches in the same order every epoch where the script's are reshuffled each epoch"
    ]
    # a generator's epochs begin where its stream is: no shuffle of fit's to hold it to
    streams = [record_of(fit_with(input_type="generator")) for _ in range(2)]
    assert same_training.differences([record_of(fit_with(marks=("a", "a", "a")))], streams) == []
    # both script runs fed batch "a" first: one that feeds "z" feeds other data
    assert same_training.differences([record_of(fit_with(marks=("z", "b", "c")))], script_runs) == [
        "its first batch holds other samples than the script's (the same in each of its 2 runs)"
    ]
    # ... unless it reshuffles by draws of its own (device batches) and says so
    assert not same_training.differences(
        [record_of(fit_with(marks=("z", "b", "c")))], script_runs, same_training.Declared(draws=True)
    )
    # a PyDataset fed by Keras' enqueuer (workers, processes) has its order drawn in a thread of the
    # enqueuer's, at a time that depends on the host's load: its first batch is no fingerprint
    for queued in ({"input_workers": 2}, {"input_workers": 1, "input_multiprocessing": True}):
        fed = [record_of(fit_with(input_type="PyDataset", **queued)) for _ in range(2)]
        assert same_training.differences([record_of(fit_with(marks=("z", "b", "c")))], fed) == []
    one = [record_of(fit_with(input_type="PyDataset", input_workers=1)) for _ in range(2)]
    assert same_training.differences([record_of(fit_with(marks=("z", "b", "c")))], one) == [
        "its first batch holds other samples than the script's (the same in each of its 2 runs)"
    ]
    # script runs that disagree on their first batch (no seed) hold nothing to compare with
    unseeded = [record_of(fit_with(marks=m, input_type="numpy")) for m in (("a", "b", "c"), ("q", "b", "c"))]
    assert same_training.differences([record_of(fit_with(marks=("z", "b", "c")))], unseeded) == []
    assert same_training.differences([record_of(fit_with(optimizer="SGD", learning_rate=1e-3))], script_runs) == [
        "trains with SGD where the script trains with Adam"
    ]
    assert same_training.differences([record_of(fit_with(optimizer="Adam", learning_rate=4e-3))], script_runs) == [
        "trains at a learning rate of 0.004 where the script trains at 0.001"
    ]
    # mixed_float16's loss scaling wraps the script's optimizer: the same optimizer
    scaled = record_of(fit_with(optimizer="LossScaleOptimizer(Adam)", learning_rate=1e-3))
    assert same_training.differences([scaled], script_runs) == []
    # a rate scaled for a larger batch, declared
    assert not same_training.differences(
        [record_of(fit_with(optimizer="Adam", learning_rate=4e-3))], script_runs, same_training.Declared(rate=True)
    )


def test_without_whole_epochs_nothing_is_compared_and_that_is_said():
    none = record_of(fit_with(epochs=[]))
    assert same_training.differences([none], [record_of(fit_with())]) == []
    assert not same_training.checked([none], [record_of(fit_with())])
    assert same_training.checked([record_of(fit_with())], [record_of(fit_with())])


def validated(validation_s: float, **fields):
    """A run whose three epochs of 1.1 s each (the first apart) validate for `validation_s` of them,
    on arrays unless `fields` (WatchedFit's) say otherwise."""
    fit = fit_with()
    epochs = [e.model_copy(update={"validation_s": validation_s}) for e in fit.epochs]
    fit = fit.model_copy(update={"epochs": epochs, "validation": True, "validation_input": "numpy", **fields})
    return record_of(fit).model_copy(update={"clock": epoch_clock.epoch_clock(fit)})


def test_validation_at_a_larger_batch_where_it_is_a_large_share_of_the_epoch():
    """Issue 86: validation a large share of an epoch, on arrays: fit's validation_batch_size at 4x
    the batch, the same training (fewer validation batches are declared); where it is a small share,
    on a dataset that batches itself, or counted by validation_steps, why not."""
    from gpuscout.tune.changes import validation_batch

    (change,) = validation_batch.validation_batch(validated(0.3))  # 0.3 s of 1.1 s: 27%
    assert (
        change.settings == {"validation_batch_size": 256} and change.line == "model.fit(..., validation_batch_size=256)"
    )
    assert change.why == "validation takes 27% of an epoch, at the training's batch of 64"
    assert (
        validation_batch.validation_batch(validated(0.1))
        == "validation takes 9% of an epoch: a larger batch there buys little"
    )
    assert "fit batches only arrays" in validation_batch.validation_batch(validated(0.3, validation_input="tf.data"))
    assert "counts batches" in validation_batch.validation_batch(validated(0.3, validation_steps=10))
    assert validation_batch.validation_batch(validated(0.3, validation_batch_size=128)).startswith("already")
    # fewer, larger validation batches are what it declares: not another training; anything else still is
    script_runs = [validated(0.3) for _ in range(2)]
    declared = same_training.Declared.of(change.tuned)
    assert (
        same_training.differences([validated(0.3, validation=True, validation_steps=None)], script_runs, declared) == []
    )
    larger = record_of(fit_with(validation=3).model_copy(update={"validation": True}))  # 3 batches, not 10
    assert same_training.differences([larger], script_runs, declared) == []
    assert same_training.differences([larger], script_runs) == [
        "validates on 3 batches an epoch where the script validates on 10"
    ]  # undeclared, it is another training
