"""cache: the input kept after its first epoch (a PyDataset) or period (a generator). A tf.data
map is cached where the script wrote it (child/tf_data.py)."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall
from gpuscout.child.watch_state import is_pydataset

# Its place in the hooks it defines (child/applies): a cache before reading ahead, which then reads the cached batches
ORDER = 50


def fit_input(fit: FitCall) -> None:
    if tune_state.SETTINGS.cache:
        fit.x = cached(fit.x)


def cached(x):
    """The input kept after its first epoch (a PyDataset) or period (a generator), as the baseline
    found them to repeat: the same code the patch writes (child/fixes.py)."""
    from gpuscout.child import fixes

    if is_pydataset(x):
        tune_state.applied("cache", "fit(CachedBatches(dataset), ...): each batch kept after it is first made")
        return fixes.CachedBatches(x)
    period = tune_state.SETTINGS.period
    if period and hasattr(x, "__next__") and not hasattr(x, "element_spec"):
        tune_state.applied(
            "cache", f"fit(replayed(batches, period={int(period)}), ...): the stream kept after its first period"
        )
        return fixes.replayed(x, int(period))
    return x
