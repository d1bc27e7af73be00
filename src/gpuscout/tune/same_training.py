"""Whether a tune candidate still trains the script's training: a speed-up that changes the training
(more steps an epoch, batches no longer shuffled, other data) is another training, not a fix, and
is never kept or patched (issue 74: `steps_per_execution` 32 on a generator of 40 steps an epoch
trained 64; device batches fed the arrays in order where fit shuffles them).

A candidate's runs are set against the runs of its reference beside them, from what the
instrumentation saw (record.watch): each whole epoch's steps, samples and validation steps, the
digest of each epoch's first batch (whether the batches are reshuffled each epoch, and, where
every reference run fed the same first batch, whether the candidate feeds it too), the epochs fit
was asked for, and the optimizer with its learning rate. What the change itself declares (a
larger batch: fewer steps of more samples, another first batch, a scaled rate; the augmentation
moved into the model: other arrays fed) is not counted against it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscout.core.tune_settings import TuneSettings
from gpuscout.record.watch import WatchedFit, WatchRecord


@dataclass(frozen=True)
class Declared:
    """What a change alters in the training on purpose, and says so in its line."""

    batch: int | None = None  # the batch it trains with instead (steps an epoch follow from it)
    rate: bool = False  # the learning rate is scaled for that batch
    inputs: bool = False  # the arrays fed differ (the augmentation moved into the model)
    # the samples are reshuffled each epoch as fit does, from draws of their own: other permutations
    # than fit's (device batches: Keras draws one more before its first epoch, to build the model;
    # a PyDataset's workers, threads or processes: Keras' queue draws its order where one worker's
    # loop draws another, [7, 8, 1, 5, ...] against [9, 4, 8, 6, ...] from one seed)
    draws: bool = False
    validation: bool = False  # the validation's batches are larger (validation_batch): fewer of them

    @classmethod
    def of(cls, settings: TuneSettings) -> Declared:
        return cls(
            batch=settings.batch_size or None,
            rate=bool(settings.learning_rate_factor),
            inputs=bool(settings.augment_in_model or settings.augment_inline or settings.augment_map),
            draws=bool(settings.device_batches or settings.workers or settings.process_workers),
            validation=bool(settings.validation_batch_size),
        )


def differences(runs: list[WatchRecord], beside: list[WatchRecord], declared: Declared = Declared()) -> list[str]:
    """How the candidate's `runs` train otherwise than the reference runs `beside` them, each as a
    phrase ("trains 64 steps an epoch where the script trains 40"); empty where they train alike
    or where nothing could be compared (no whole epoch ran)."""
    fits = [r.main for r in runs if r.main is not None]
    references = [r.main for r in beside if r.main is not None]
    if not fits or not references:
        return []
    out: list[str] = []
    for found in (
        _epochs(fits, references, declared),
        _validation(fits, references, declared),
        _shuffle(fits, references),
        _content(fits, references, declared),
        _plan(fits[-1], references[-1]),
        _optimizer(fits[-1], references[-1], declared),
    ):
        out += [f for f in dict.fromkeys(found) if f not in out]  # each once, in the order seen
    return out


def checked(runs: list[WatchRecord], beside: list[WatchRecord]) -> bool:
    """Whether whole epochs ran on both sides: the steps, samples and batches an epoch compared."""
    return any(r.main and r.main.epochs for r in runs) and any(r.main and r.main.epochs for r in beside)


def _epochs(fits: list[WatchedFit], references: list[WatchedFit], declared: Declared) -> list[str]:
    """Each whole epoch's steps and samples against the reference's (a larger batch: its samples only,
    to within one of its batches, the last one being partial)."""
    steps = _most(e.steps for f in references for e in f.epochs)
    # 0: not counted (a tf.data input read inside a compiled loop, of a batch its spec leaves open)
    samples = _most(e.samples for f in references for e in f.epochs if e.samples)
    out = []
    for fit in fits:
        for epoch in fit.epochs:
            if declared.batch is None and steps is not None and epoch.steps != steps:
                out.append(f"trains {epoch.steps:,} steps an epoch where the script trains {steps:,}")
            if (
                samples is not None
                and epoch.samples  # 0: not counted
                and epoch.samples != samples
                and (declared.batch is None or abs(epoch.samples - samples) >= declared.batch)
            ):
                out.append(f"sees {epoch.samples:,} samples an epoch where the script sees {samples:,}")
    return out


def _validation(fits: list[WatchedFit], references: list[WatchedFit], declared: Declared) -> list[str]:
    """Validation steps an epoch against the reference's; with a declared batch, not compared:
    fit validates at its batch_size (validation_batch_size's default), the same data in fewer steps."""
    if declared.batch is not None or declared.validation:
        return []
    counted = _most(e.validation_steps for f in references for e in f.epochs if e.validation_steps is not None)
    if counted is None:
        return []
    return [
        f"validates on {e.validation_steps:,} batches an epoch where the script validates on {counted:,}"
        for f in fits
        for e in f.epochs
        if e.validation_steps is not None and e.validation_steps != counted
    ]


def _reshuffled(fit: WatchedFit) -> bool | None:
    """Whether the fit's epochs began with different batches (None: fewer than two epochs read)."""
    marks = [e.first_batch for e in fit.epochs if e.first_batch is not None]
    return len(set(marks)) > 1 if len(marks) > 1 else None


# The inputs fit's own shuffle applies to: a generator's or a tf.data dataset's epochs begin where
# the stream is, whatever the order (more steps an epoch is said by _epochs)
SHUFFLED_BY_FIT = ("numpy", "jax array", "PyDataset")


def _shuffle(fits: list[WatchedFit], references: list[WatchedFit]) -> list[str]:
    if any(f.input_type not in SHUFFLED_BY_FIT for f in references):
        return []
    script = {s for f in references if (s := _reshuffled(f)) is not None}
    if len(script) != 1:  # not seen, or the script's own runs disagree: nothing to hold it to
        return []
    shuffled = script.pop()
    for fit in fits:
        own = _reshuffled(fit)
        if own is not None and own != shuffled:
            return [
                "feeds its batches in the same order every epoch where the script's are reshuffled each epoch"
                if shuffled
                else "reshuffles its batches each epoch where the script's come in the same order"
            ]
    return []


def _content(fits: list[WatchedFit], references: list[WatchedFit], declared: Declared) -> list[str]:
    """The first batch of the first epoch, where every reference run fed the same one (a seeded
    script): a candidate that feeds another feeds other data, or in another order."""
    if declared.batch is not None or declared.inputs or declared.draws or any(_queued(f) for f in references):
        return []
    marks = [f.epochs[0].first_batch for f in references if f.epochs and f.epochs[0].epoch == 1]
    if len(marks) < 2 or None in marks or len(set(marks)) > 1:
        return []
    for fit in fits:
        if fit.epochs and fit.epochs[0].epoch == 1 and fit.epochs[0].first_batch not in (None, marks[0]):
            return [
                f"its first batch holds other samples than the script's (the same in each of its {len(marks)} runs)"
            ]
    return []


def _queued(fit: WatchedFit) -> bool:
    """Whether Keras fed the fit's PyDataset through its OrderedEnqueuer (workers > 1, or processes):
    that enqueuer shuffles the batches' order in a thread of its own, from the `random` module's
    one stream (keras/src/trainers/data_adapters/py_dataset_adapter.py, OrderedEnqueuer._run),
    while the main thread draws from it too, so which batch comes first depends on the timing of
    the two threads: two runs of a seeded script fed the same first batch on a quiet host and not
    beside a busy one (issue 86, item 6: the cache was called "changes the training")."""
    return fit.input_type == "PyDataset" and ((fit.input_workers or 1) > 1 or bool(fit.input_multiprocessing))


def _plan(fit: WatchedFit, reference: WatchedFit) -> list[str]:
    out = []
    if fit.epochs_planned and reference.epochs_planned and fit.epochs_planned != reference.epochs_planned:
        out.append(f"is asked for {fit.epochs_planned:,} epochs where the script asks for {reference.epochs_planned:,}")
    if fit.validation != reference.validation:
        out.append(
            "validates where the script does not" if fit.validation else "does not validate where the script does"
        )
    return out


def _optimizer(fit: WatchedFit, reference: WatchedFit, declared: Declared) -> list[str]:
    out = []
    mine, theirs = _inner(fit.optimizer), _inner(reference.optimizer)
    if mine and theirs and mine != theirs:
        out.append(f"trains with {mine} where the script trains with {theirs}")
    rate, script = fit.learning_rate, reference.learning_rate
    if (
        not declared.rate
        and rate is not None
        and script is not None
        and abs(rate - script) > 1e-6 * max(abs(script), 1e-12)
    ):
        out.append(f"trains at a learning rate of {rate:.3g} where the script trains at {script:.3g}")
    return out


def _inner(name: str | None) -> str | None:
    """An optimizer's own class: mixed_float16's LossScaleOptimizer(Adam) is Adam, scaled."""
    if not name:
        return None
    found = re.fullmatch(r"LossScaleOptimizer\((.*)\)", name)
    return found.group(1) if found else name


def _most(values) -> int | None:
    """The most common value (the reference's epochs agree but for a last, partial one)."""
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda v: (counts[v], v)) if counts else None
