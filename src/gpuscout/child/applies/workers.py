"""workers: a PyDataset's worker threads, set where fit reads them. A tf.data
pipeline's parallel calls are made where the script builds it (child/tf_data.py)."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall
from gpuscout.child.watch_state import is_pydataset

# Its place in the hooks it defines (child/applies): a dataset's threads, before its work is moved or sent anywhere
ORDER = 20


def fit_input(fit: FitCall) -> None:
    workers, x = tune_state.SETTINGS.workers, fit.x
    if workers and is_pydataset(x):
        x._workers, x._use_multiprocessing = int(workers), False  # PyDataset reads these at fit
        x._max_queue_size = 2 * int(workers)  # as the patch writes it
        tune_state.applied("workers", f"PyDataset(workers={int(workers)}, use_multiprocessing=False)")
