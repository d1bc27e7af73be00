"""The libraries a sweep's warm interpreter may import before it forks trials (executor/warm.py):
each is heavy to import (seconds, where a Python process starts in milliseconds), touches no GPU
at import (a device context does not survive a fork; the zygote checks that none was opened),
and reads at import only environment variables that are the same for every trial. A module of
the user's own never is: importing it could run anything.

Both sides use this: a trial's instrumentation reports which of them its process imported
(child/watch_state.py), so the next trials start with them imported too.
"""

from __future__ import annotations

import sys

FRAMEWORKS = frozenset(
    {
        "keras",
        "tensorflow",
        "tf_keras",
        "tensorflow_datasets",
        "tensorflow_probability",
        "jax",
        "flax",
        "optax",
        "torch",
        "numpy",
        "scipy",
        "pandas",
        "sklearn",
        "transformers",
        "datasets",
        "PIL",
    }
)


def imported() -> list[str]:
    """The frameworks this process has imported, in the order it imported them."""
    return [name for name in list(sys.modules) if name in FRAMEWORKS]
