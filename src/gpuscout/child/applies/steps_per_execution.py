"""steps_per_execution: several steps in one host call, set at compile."""

from __future__ import annotations

from gpuscout.child import tune_state

# Its place in the hooks it defines (child/applies): compile's keywords, after XLA's
ORDER = 15


def compile_kwargs(kwargs: dict) -> dict:
    spe = tune_state.SETTINGS.steps_per_execution
    if spe:
        kwargs["steps_per_execution"] = int(spe)
        tune_state.applied("steps_per_execution", f"model.compile(..., steps_per_execution={int(spe)})")
    return kwargs
