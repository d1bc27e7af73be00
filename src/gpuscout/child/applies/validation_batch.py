"""validation_batch: fit validates its arrays at a larger batch (validation_batch_size)."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall

# Its place in the hooks it defines (child/applies): the validation's keywords, last: nothing after it reads them
ORDER = 90


def fit_input(fit: FitCall) -> None:
    size = tune_state.SETTINGS.validation_batch_size
    if size:  # planned only where fit validates arrays (tune/changes/validation_batch.py)
        fit.kwargs["validation_batch_size"] = int(size)
        tune_state.applied("validation_batch", f"model.fit(..., validation_batch_size={int(size)})")
