"""mixed_precision: the global policy set before the first layer is built, and kept where the
script sets float32 again."""

from __future__ import annotations

from gpuscout.child import tune_state

# Its place in the hooks it defines (child/applies): a policy set as Keras loads, before any layer exists
ORDER = 0


def on_keras() -> None:
    """Keras' model module has just been executed: no layer exists yet."""
    policy = tune_state.SETTINGS.mixed_precision
    if not policy:
        return
    # keras' top-level package is still being imported here: its own module, not keras.mixed_precision
    from keras.src.dtype_policies.dtype_policy import set_dtype_policy

    set_dtype_policy(policy)
    tune_state.applied("mixed_precision", f"keras.mixed_precision.set_global_policy({policy!r}) before the first layer")
    _keep_policy(policy)


def _keep_policy(policy: str) -> None:
    """The script's own float32 policy, set after Keras' import (a script left in debugging settings
    calls set_global_policy('float32'); keras.backend.clear_session() resets it), replaced with
    tune's: every path that sets the policy goes through Keras' global state (issue 60: on an H100
    the script's call undid the change, and mixed precision measured 0.98x on top of a batch of
    2,048 where the fix by hand ran 1.8x)."""
    from keras.src.backend.common import global_state
    from keras.src.dtype_policies.dtype_policy import DTypePolicy

    original = global_state.set_global_attribute

    def set_global_attribute(name, value):
        if name == "dtype_policy" and getattr(value, "name", None) == "float32":
            value = DTypePolicy(policy)
            tune_state.applied("mixed_precision (kept)", f"the script's float32 policy replaced with {policy!r}")
        return original(name, value)

    global_state.set_global_attribute = set_global_attribute
