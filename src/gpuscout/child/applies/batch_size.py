"""batch_size: fit's batch of in-memory arrays, and the learning rate scaled and warmed up for it."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall

# Its place in the hooks it defines (child/applies): a larger batch before the arrays are cut into device slices
ORDER = 70


def fit_input(fit: FitCall) -> None:
    batch = tune_state.SETTINGS.batch_size
    if batch:  # before device_batches, which cuts the arrays at fit's batch
        fit.kwargs["batch_size"] = int(batch)
        tune_state.applied("batch_size", f"model.fit(..., batch_size={int(batch)})")
        scale_learning_rate(fit.model, fit.kwargs.get("callbacks"))


def scale_learning_rate(model, callbacks) -> None:
    """The learning rate scaled for the larger batch, warmed up to it (fixes.scaled_learning_rate):
    what the change's line tells the user to write, measured with it. Beside a callback that sets
    the rate itself, scaled once, without the warm-up (the callback's own values then rule)."""
    factor = tune_state.SETTINGS.learning_rate_factor
    optimizer = getattr(model, "optimizer", None)
    if not factor or optimizer is None:
        return
    from gpuscout.child.fixes import scaled_learning_rate
    from gpuscout.child.model_facts import sets_learning_rate

    setter = next(
        (
            type(c).__name__
            for c in (callbacks if isinstance(callbacks, (list, tuple)) else ())
            if sets_learning_rate(c)
        ),
        None,
    )  # a schedule in its place would stop it (TypeError)
    warmup = 0 if setter else 1 if tune_state.SETTINGS.warmup_steps is None else tune_state.SETTINGS.warmup_steps
    scaled_learning_rate(optimizer, float(factor), warmup)
    tune_state.applied(
        "learning_rate",
        f"scaled_learning_rate(model.optimizer, {float(factor):g}, warmup_steps={warmup})"
        + (f": no warm-up beside the script's {setter}, which sets the rate itself" if setter else ""),
    )
