"""What each change `tune -- COMMAND` makes does inside the running script, one module per change
(tune/changes/ holds the same changes on the parent's side: their plans and patches). Each module
defines the hooks it needs, each doing nothing unless this run's settings (child/tune_state.py)
ask for it:

- `on_keras()`: Keras' model module has just loaded, no layer exists yet (a policy, a distribution);
- `compile_kwargs(kwargs) -> kwargs`: `Model.compile`'s keywords;
- `fit_input(fit)`: one `Model.fit` call (applies/call.py's FitCall), its input and keywords.

The orders below are the hooks' (child/tune_overrides.py calls them so): where two changes meet
in one call, which must come first (a larger batch before the arrays are cut into device slices;
a cache before reading ahead, which then reads the cached batches; the augmentation moved out of
the dataset before it is sent to worker processes).
"""

from __future__ import annotations

from gpuscout.child.applies import (
    augment_in_model,
    augment_inline,
    augment_map,
    batch_size,
    cache,
    data_parallel,
    device_batches,
    jit_compile,
    mixed_precision,
    prefetch,
    process_workers,
    steps_per_execution,
    validation_batch,
    workers,
)

ON_KERAS = (mixed_precision, data_parallel)
COMPILE = (jit_compile, steps_per_execution)
FIT = (
    jit_compile,
    workers,
    augment_in_model,
    augment_inline,
    augment_map,
    process_workers,
    cache,
    prefetch,
    batch_size,
    device_batches,
    validation_batch,
)
