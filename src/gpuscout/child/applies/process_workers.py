"""process_workers: fit's PyDataset handed over as child/spawned_workers.SpawnedWorkers, its batches made in
new interpreters (tune/changes/process_workers.py says why never forked ones)."""

from __future__ import annotations

import sys

from gpuscout.child import tune_state
from gpuscout.child.applies.call import FitCall
from gpuscout.child.watch_state import is_pydataset

# Its place in the hooks it defines (child/applies): the dataset, once its augmentation is moved out, made in worker
# processes
ORDER = 40


def fit_input(fit: FitCall) -> None:
    count, x = tune_state.SETTINGS.process_workers, fit.x
    if not count or not is_pydataset(x):
        return
    from gpuscout.child.spawned_workers import SpawnedWorkers

    try:
        fit.x = SpawnedWorkers(x, int(count))
    except (TypeError, ImportError, OSError) as exc:  # a dataset that cannot be sent: trained as it was
        print(f"gpuscout: process_workers not applied: {exc}", file=sys.stderr)
        return
    tune_state.applied("process_workers", f"fit(SpawnedWorkers(dataset, workers={int(count)}), ...)")
