"""The host time each of the user's callbacks takes in a watched fit (child/watch_fit.py), and
whether one makes Keras wait for every step's logs: its hooks wrapped on the instance, so an
epoch says what its callbacks cost (a ModelCheckpoint's save, a logger's work), and put back at
the fit's end. Only the standard library is imported here."""

from __future__ import annotations

import time


class CallbackTimes:
    """The user's callbacks of one fit, their hooks timed: `seconds` by callback, this epoch."""

    def __init__(self, callbacks) -> None:
        self.seconds: dict[str, float] = {}
        self.timed_hooks: list[tuple] = []  # (callback, hook, its own instance attribute or None)
        for callback in callbacks:
            self.time(callback)

    def time(self, callback) -> None:
        """Time the hooks this callback implements (a wrapper on the instance: Keras calls it the
        same way, and its async-dispatch check sees the same non-default methods)."""
        name = type(callback).__name__
        for hook in CALLBACK_HOOKS:
            method = getattr(callback, hook, None)
            method = getattr(method, "_gpuscout_original", method)  # timed by an earlier fit: time it anew
            if method is None or getattr(method, "_is_default", False):
                continue

            def timed(*args, _method=method, **kwargs):
                start = time.monotonic()
                try:
                    return _method(*args, **kwargs)
                finally:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - start

            timed._gpuscout_original = method
            self.timed_hooks.append(
                (callback, hook, vars(callback).get(hook) if hasattr(callback, "__dict__") else None)
            )
            setattr(callback, hook, timed)

    def untime(self) -> None:
        """The user's callbacks as they were: a callback kept for a later fit (a notebook's next
        cell) runs its own methods, untimed."""
        for callback, hook, own in reversed(self.timed_hooks):
            if own is None:
                vars(callback).pop(hook, None)
            else:
                setattr(callback, hook, own)
        self.timed_hooks = []


# The hooks of a user's callback that run during training (epoch and batch); validation's are
# outside the timed steps.
CALLBACK_HOOKS = (
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
)


def waits_for_logs(callback) -> bool:
    """Keras' own rule (keras/src/callbacks/callback_list.py, _configure_async_dispatch): a
    callback that is not async_safe and implements a batch-end hook makes Keras convert every
    step's logs to Python numbers, which waits for the step to finish on the device."""
    if getattr(callback, "async_safe", False):
        return False
    return any(
        hasattr(callback, hook) and not getattr(getattr(callback, hook), "_is_default", False)
        for hook in ("on_batch_end", "on_train_batch_end")
    )
