"""jit_compile: XLA at compile, and a step left op by op by Keras' debugging setting compiled
whatever the script set after compile."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall

# Its place in the hooks it defines (child/applies): compile's keywords first, and at fit the step compiled before
# the input is changed
ORDER = 10


def compile_kwargs(kwargs: dict) -> dict:
    if tune_state.SETTINGS.run_eagerly is False:  # before jit: Keras turns XLA off under run_eagerly=True
        kwargs["run_eagerly"] = False
    if tune_state.SETTINGS.jit_compile:
        kwargs["jit_compile"] = True
        tune_state.applied("jit_compile", "model.compile(..., jit_compile=True)")
    return kwargs


def fit_input(fit: FitCall) -> None:
    if tune_state.SETTINGS.run_eagerly is False and fit.model is not None:
        compiled_step(fit.model)


def compiled_step(model) -> None:
    """The step compiled whatever the script set after compile (`model.run_eagerly = True`, its
    debugging line): run_eagerly off, and XLA on where the change asks (Keras turned it off
    at compile when run_eagerly was on)."""
    model.run_eagerly = False
    if tune_state.SETTINGS.jit_compile:
        model.jit_compile = True
    tune_state.applied(
        "jit_compile",
        "model.compile(..., run_eagerly=False" + (", jit_compile=True)" if tune_state.SETTINGS.jit_compile else ")"),
    )
