"""Larger batches for `gpuscout tune`: how far memory and the epoch let a batch grow, the factors a
round tries, and the learning rate each comes with (scaled by the rule for its optimizer, warmed
up over an epoch of the new batch). Used by the plan (tune/script.py: batch_size, and
data_parallel's batch times the devices)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.record.watch import WatchedFit, WatchRecord
from gpuscout.tune.change import Change

# Memory a larger batch may plan to use, of the GPU's (the rest: fragmentation, the framework's own).
BATCH_MEMORY_SHARE = 0.9


def fit_batches(main: WatchedFit | None) -> bool:
    """fit cuts the batches itself (in-memory arrays and a batch_size): a change can set their size."""
    return main is not None and main.input_type in ("numpy", "jax array") and bool(main.batch_size)


def larger_batches(r: WatchRecord, script_batch: int | None = None) -> list[Change] | str:
    """Larger batches, as far as memory and the data allow (batch_factors), each with the learning
    rate scaled for it (learning_rate): a setting that is a larger batch already gets the next
    ones (ChangeKind.repeatable). Named by their factor over the script's own batch."""
    main = r.main
    if main is None or not main.batch_size or not fit_batches(main):
        kind = main.input_type if main is not None else None
        return f"the input ({kind}) comes in batches of its own: fit's batch_size does not change them"
    most = most_batch_factor(r)
    if isinstance(most, str):
        return most
    base = script_batch or main.batch_size
    out = []
    for f in batch_factors(most):
        batch = main.batch_size * f
        rate = learning_rate(main, batch / base, epoch_steps(main, batch))
        out.append(
            Change(
                f"batch_size_x{batch // base}",
                "batch_size",
                {"batch_size": batch, **rate.settings},
                f"model.fit(..., batch_size={batch})" + rate.line,
                f"batch {main.batch_size} of in-memory arrays (compared per sample: samples/s)",
            )
        )
    return out


# A batch is enlarged in one round by these factors at most (the larger a factor, the fewer rounds
# reach the batch a compiled step needs: a small ViT left at batch 32 ran 3.2x faster at 1,024 than
# at 128, H100, docs/benchmarks.md); the next round refines from the winner (x2, x4 of it).
BATCH_FACTORS = (4, 16, 64)
# Steps an epoch keeps at the largest batch tried: fewer, and an epoch's end (its callbacks,
# validation, Keras' iterator made again) is a larger share of the time than at the script's batch
MIN_EPOCH_STEPS = 16


def batch_factors(most: int) -> list[int]:
    """The factors tried in one round, up to `most`: BATCH_FACTORS, and `most` itself where it
    falls between them (x2 where nothing larger fits)."""
    if most < 2:
        return []
    found = {f for f in BATCH_FACTORS if f <= most} | {min(most, BATCH_FACTORS[-1])}
    return sorted(found)


def most_batch_factor(r: WatchRecord) -> int | str:
    """The largest power-of-two factor of the run's batch that fits the GPU's memory (memory grows
    at most in proportion to the batch: the weights' share does not) and keeps MIN_EPOCH_STEPS
    steps an epoch; a reason where not even x2 does."""
    main = r.main
    if main is None or not main.batch_size:
        return "the run's batch is not known: no larger one is planned"
    most = 2**20
    if r.gpu is not None:
        peak, total = main.peak_memory_bytes, r.gpu.memory_total_bytes
        if not peak or not total:
            return "the run's peak memory is not known: no batch is promised to fit"
        most = int(BATCH_MEMORY_SHARE * total // peak)
        if most < 2:
            return f"twice the batch would not fit ({peak * 2 / 2**30:.1f} GiB of {total / 2**30:.0f} GiB)"
    samples = epoch_samples(main)
    if samples:
        most = min(most, samples // (MIN_EPOCH_STEPS * main.batch_size))
        if most < 2:
            return (
                f"an epoch holds {samples:,} samples: a batch of {2 * main.batch_size} would leave fewer than "
                f"{MIN_EPOCH_STEPS} steps an epoch"
            )
    return int(2 ** int(math.log2(most)))


def epoch_samples(main: WatchedFit) -> int | None:
    return main.steps_per_epoch * main.batch_size if main.steps_per_epoch and main.batch_size else None


def epoch_steps(main: WatchedFit, batch: int) -> int | None:
    samples = epoch_samples(main)
    return max(1, samples // batch) if samples else None


@dataclass(frozen=True)
class Rate:
    settings: dict[str, float | int]  # learning_rate_factor and warmup_steps, for child/tune_overrides.py
    line: str  # what the changed line says of it


# Optimizers whose update is the gradient times the rate: the linear scaling rule (Goyal et al.
# 2017). Adaptive ones (Adam, AdamW, RMSprop, Lion, ...) scale by the square root (Malladi et al.
# 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"): a linear x32 on AdamW's
# 1e-3 is a rate no transformer trains at.
LINEAR_RATE_OPTIMIZERS = ("SGD",)


def learning_rate(main: WatchedFit, factor: float, warmup_steps: int | None) -> Rate:
    """The learning rate for a batch `factor` times the script's: scaled by the rule for its
    optimizer, reached by a linear warm-up over one epoch of the new batch (Goyal et al. 2017,
    section 2.2, warm up from the rate as it was), as the measured runs train it and the patch
    writes it (child/fixes.py scaled_learning_rate)."""
    if factor <= 1:
        return Rate({}, "")
    optimizer = main.optimizer
    if not optimizer:
        return Rate({}, "   # the optimizer was not seen: scale its learning rate for the batch yourself")
    inner = optimizer.split("(")[-1].rstrip(")")
    linear = inner in LINEAR_RATE_OPTIMIZERS
    scale = factor if linear else math.sqrt(factor)
    # beside a callback that sets the rate as a number, no schedule: it would stop the callback
    warmup = 0 if main.rate_callback else (warmup_steps or 1)
    rule = (
        "x the batch's factor: the linear scaling rule, Goyal et al. 2017"
        if linear
        else f"x the square root of the batch's factor for {inner}: Malladi et al. 2022"
    )
    how = f"warmed up over {warmup} steps" if warmup else f"no warm-up beside the script's {main.rate_callback}"
    return Rate(
        {"learning_rate_factor": round(scale, 4), "warmup_steps": warmup},
        f"   # and the learning rate x{scale:.3g} ({rule}), {how} (scaled_learning_rate)",
    )
