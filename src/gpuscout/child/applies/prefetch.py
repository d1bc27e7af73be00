"""prefetch: a tf.data dataset's pipeline tuned and prefetched, a generator read ahead on a thread."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall

# Its place in the hooks it defines (child/applies): reading ahead of what the cache and workers make
ORDER = 60


def fit_input(fit: FitCall) -> None:
    if not tune_state.SETTINGS.prefetch:
        return
    x = fit.x
    if type(x).__module__.startswith("tensorflow") and hasattr(x, "prefetch"):
        from gpuscout.child.fixes import tuned_pipeline

        fit.x = tuned_pipeline(x)
        tune_state.applied(
            "prefetch", "fit(tuned_pipeline(dataset), ...): autotuned, parallel maps in order, prefetched"
        )
    elif hasattr(x, "__next__") and not hasattr(x, "element_spec"):
        from gpuscout.child.fixes import read_ahead

        fit.x = read_ahead(x, tune_state.SETTINGS.prefetch_depth)
        tune_state.applied("prefetch", "the generator read 8 batches ahead by a background thread (read_ahead)")
