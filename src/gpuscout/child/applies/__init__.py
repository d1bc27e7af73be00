"""What each change `tune -- COMMAND` makes does inside the running script, one module per change
(tune/changes/ holds the same changes on the parent's side: their plans and patches). Each module
defines the hooks it needs, each doing nothing unless this run's settings (child/tune_state.py)
ask for it:

- `on_keras()`: Keras' model module has just loaded, no layer exists yet (a policy, a distribution);
- `compile_kwargs(kwargs) -> kwargs`: `Model.compile`'s keywords;
- `fit_input(fit)`: one `Model.fit` call (applies/call.py's FitCall), its input and keywords.

Each module says its place in the hooks it defines (`ORDER`, with why it is there); the modules
are found here, not listed, so a new change's applier is its one module. Where two changes meet in
one call, the order says which comes first (a larger batch before the arrays are cut into device
slices; a cache before reading ahead, which then reads the cached batches; the augmentation moved
out of the dataset before it is sent to worker processes).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _appliers() -> list[ModuleType]:
    """This package's modules that apply a change (those with an ORDER), in that order."""
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    return sorted((m for m in found if hasattr(m, "ORDER")), key=lambda m: m.ORDER)


APPLIERS = _appliers()
ON_KERAS = tuple(m for m in APPLIERS if hasattr(m, "on_keras"))
COMPILE = tuple(m for m in APPLIERS if hasattr(m, "compile_kwargs"))
FIT = tuple(m for m in APPLIERS if hasattr(m, "fit_input"))
