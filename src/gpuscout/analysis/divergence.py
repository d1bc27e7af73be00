"""A training whose loss went NaN or infinite: where (the fit's epoch, and the steps of it between
which it happened), and the verdict's finding, with the usual causes to check for the run's
precision and optimizer. A diverging training is data: the record keeps every value as it was.

Where: Keras' `loss` in fit's logs is the mean of the epoch's steps so far (its loss tracker is a
`Mean` metric, reset at each epoch's start), so once one step's loss is NaN the mean stays NaN to
the epoch's end. watch reads it at each window's end (about a second apart, after the
synchronisation the window makes anyway), so the first NaN step lies after the last window that
read a finite mean and at or before the first that read NaN: a range of steps, never a guess.
"""

from __future__ import annotations

import math

from gpuscout.record.epochs import WatchEpoch
from gpuscout.record.watch import Cause, Divergence, WatchedFit, WatchWindow

# float16's largest finite value (IEEE 754 binary16): past it a value overflows to inf.
FLOAT16_MAX = 65504.0


def not_finite(value) -> str | None:
    """ "NaN", "inf" or "-inf" for a number that is one of them; None for anything else."""
    if not isinstance(value, float) or math.isfinite(value):
        return None
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _is_loss(name: str) -> bool:
    """A value of fit's logs that is a loss (loss, val_loss, an output's loss): a metric's NaN (an
    AUC with one class seen, a precision with no positives) is not a training that diverged."""
    return name == "loss" or name.endswith("_loss")


def find(fit: WatchedFit) -> Divergence | None:
    """Where `fit`'s loss first went NaN or infinite (the training loss by window; else the first
    epoch whose logs hold a loss that is not finite; else its last step's loss); None where it
    never did."""
    epochs = sorted(fit.epochs, key=lambda e: e.start_monotonic_s)
    by_window = _by_window(fit, epochs)
    if by_window is not None:
        return by_window
    for epoch in sorted(epochs, key=lambda e: e.epoch):
        losses = [k for k in epoch.logs if _is_loss(k) and not_finite(epoch.logs[k])]
        if losses:
            name = "loss" if "loss" in losses else losses[0]
            return Divergence(
                metric=name,
                value=not_finite(epoch.logs[name]),
                epoch=epoch.epoch,
                last_finite=_finite_before(epochs, epoch, name),
            )
    value = not_finite(fit.last_loss)
    if value is not None:
        return Divergence(metric="loss", value=value, epoch=_number(None, epochs, fit))
    return None


def _by_window(fit: WatchedFit, epochs: list[WatchEpoch]) -> Divergence | None:
    """The first window whose end read a loss that is not finite, placed in its epoch: its steps
    counted from the epoch's start (the fit's first step, the compile, opens the first epoch)."""
    current = None
    for index, window in enumerate(fit.windows):
        epoch = _epoch_of(window, epochs)
        if index == 0 or epoch is not current:  # a new epoch: Keras' mean starts again
            steps, last_finite, last_finite_step, current = (1 if index == 0 else 0), None, None, epoch
        steps += window.steps
        value = not_finite(window.loss)
        if value is not None:
            return Divergence(
                metric="loss",
                value=value,
                epoch=_number(epoch, epochs, fit),
                first_step=(last_finite_step or 0) + 1,
                last_step=steps,
                last_finite=last_finite,
                last_finite_step=last_finite_step,
            )
        if window.loss is not None:
            last_finite, last_finite_step = window.loss, steps
    return None


def _number(epoch: WatchEpoch | None, epochs: list[WatchEpoch], fit: WatchedFit) -> int | None:
    """The epoch's number; for a window in none that ended (the run stopped during it), the one
    after the last that did; None for a custom loop, which has no epochs."""
    if epoch is not None:
        return epoch.epoch
    if fit.custom:
        return None
    return max((e.epoch for e in epochs), default=0) + 1


def _epoch_of(window: WatchWindow, epochs: list[WatchEpoch]) -> WatchEpoch | None:
    for epoch in epochs:
        if epoch.start_monotonic_s <= window.start_monotonic_s and window.end_monotonic_s <= epoch.end_monotonic_s:
            return epoch
    return None


def _finite_before(epochs: list[WatchEpoch], epoch: WatchEpoch, name: str) -> float | None:
    earlier = [e.logs.get(name) for e in epochs if e.epoch < epoch.epoch]
    finite = [v for v in earlier if isinstance(v, float) and math.isfinite(v)]
    return finite[-1] if finite else None


def where(d: Divergence, fit: WatchedFit | None = None) -> str:
    """ "in epoch 5, at a step between 121 and 240 (of 500)", in words."""
    of = f" (of {fit.steps_per_epoch})" if fit is not None and fit.steps_per_epoch else ""
    if d.first_step is not None and d.last_step is not None:
        steps = (
            f"at step {d.last_step}{of}"
            if d.first_step == d.last_step
            else f"at a step between {d.first_step} and {d.last_step}{of}"
        )
        return f"in epoch {d.epoch}, {steps}" if d.epoch is not None else steps
    return f"in epoch {d.epoch}" if d.epoch is not None else "by its last step"


def cause(fit: WatchedFit | None) -> Cause | None:
    """The verdict's finding for a fit whose loss went NaN or infinite: the speed figures are of
    steps that learn nothing, so it comes first, with what to check for its precision and optimizer."""
    d = fit.diverged if fit is not None else None
    if d is None:
        return None
    said = f"the {d.metric} went {d.value} {where(d, fit)}"
    before = ""
    if d.last_finite is not None:
        at = f" at step {d.last_finite_step}" if d.last_finite_step is not None else " the epoch before"
        before = f"{d.metric} {d.last_finite:.4g}{at}, then {d.value}"
        if d.first_step is not None:
            before += " (Keras' epoch mean carries one bad step to the epoch's end)"
    rate = _rate_when(fit, d)
    setting = ", ".join(
        s
        for s in (_optimizer_text(fit, rate), f"precision {fit.precision_policy}" if fit.precision_policy else None)
        if s
    )
    checks, snippet = _checks(fit, d, rate)
    return Cause(
        code="loss_not_finite",
        saving_share=None,
        message=f"{said}: the training diverged, and the figures are of steps that learn nothing",
        evidence="; ".join(s for s in (before, setting) if s) or f"fit's logs: {d.metric} {d.value}",
        fix="; ".join(checks),
        code_snippet=snippet,
    )


def _rate_when(fit: WatchedFit, d: Divergence) -> float | None:
    """The learning rate in the epoch the loss went bad, as fit's logs say it (Keras logs it where
    a schedule or a callback sets it), else the one the optimizer started with."""
    logged = {e.epoch: e.logs.get("learning_rate", e.logs.get("lr")) for e in fit.epochs}
    numbers = {k: v for k, v in logged.items() if isinstance(v, float) and math.isfinite(v)}
    if d.epoch in numbers:
        return numbers[d.epoch]
    earlier = [k for k in numbers if d.epoch is None or k < d.epoch]
    return numbers[max(earlier)] if earlier else fit.learning_rate


def _optimizer_text(fit: WatchedFit, rate: float | None) -> str | None:
    if fit.optimizer is None:
        return None
    said = f", learning rate {rate:g}" if rate is not None else ""
    if rate is not None and fit.learning_rate is not None and not math.isclose(rate, fit.learning_rate):
        said += f" in that epoch (it began at {fit.learning_rate:g}: a schedule or a callback set it)"
    return f"optimizer {fit.optimizer}{said}"


def _checks(fit: WatchedFit, d: Divergence, learning_rate: float | None) -> tuple[list[str], str]:
    """The usual causes, most likely first for this precision and optimizer, and the lines that
    find or prevent the bad step."""
    policy = fit.precision_policy or "float32"
    optimizer = fit.optimizer or "the optimizer"
    rate = f" ({learning_rate:g} then)" if learning_rate is not None else ""
    checks = []
    if learning_rate is not None and fit.learning_rate is not None and learning_rate > 10 * fit.learning_rate:
        checks.append(
            f"the learning rate rose from {fit.learning_rate:g} to {learning_rate:g} by that epoch: look at "
            "the schedule or the callback that sets it"
        )
    if policy == "mixed_float16":
        scaled = fit.optimizer is not None and fit.optimizer.startswith("LossScaleOptimizer")
        checks.append(
            f"float16 overflows past {FLOAT16_MAX:,.0f}: "
            + (
                "the loss is scaled (LossScaleOptimizer), so look for an activation or a custom loss that "
                "overflows in float16"
                if scaled
                else f"{optimizer} is not a LossScaleOptimizer: set the mixed_float16 policy before model.compile "
                "(fit then scales the loss), or wrap it in keras.optimizers.LossScaleOptimizer"
            )
            + "; keep the output layer and the loss in float32 (dtype='float32' on the last layer)"
        )
    elif policy == "mixed_bfloat16":
        checks.append(
            "bfloat16 keeps 8 bits of mantissa: keep the output layer, the softmax and the loss in float32 "
            "(dtype='float32' on the last layer) and normalisation layers in float32; run a few epochs in "
            "float32 to see whether precision is the cause"
        )
    checks.append(
        f"lower {optimizer}'s learning rate{rate}, tenfold until the loss falls, or add a warm-up; clip "
        "the gradients (clipnorm=1.0 in the optimizer)"
    )
    checks.append(
        "check the inputs and targets for NaN or inf (np.isfinite(x).all()) and a custom loss for a log of "
        "zero or a division by zero"
    )
    if d.metric != "loss":
        checks.append(
            f"only {d.metric} went {d.value}: the validation data (or its preprocessing) holds values "
            "the training data does not"
        )
    lr = learning_rate / 10 if learning_rate is not None else 1e-4
    snippet = (
        "model.compile(optimizer=keras.optimizers." + _optimizer_class(fit) + f"(learning_rate={lr:g}, "
        "clipnorm=1.0), ...)\n"
        "model.fit(..., callbacks=[keras.callbacks.TerminateOnNaN()])  # stops at the first NaN step"
    )
    return checks, snippet


def _optimizer_class(fit: WatchedFit) -> str:
    """The optimizer's class for the snippet (the wrapped one under a LossScaleOptimizer)."""
    name = fit.optimizer or "Adam"
    return name.split("(", 1)[1].rstrip(")") if "(" in name else name
