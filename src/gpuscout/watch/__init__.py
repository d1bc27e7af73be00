"""`gpuscout watch`: your own training script, unchanged, measured and diagnosed.

What a script may call itself (and nothing else here is imported by it): a training loop of
its own, which `Model.fit`'s instrumentation cannot see, marks each step with one line::

    import gpuscout.watch
    for batch in data:
        loss = train_step(batch)
        gpuscout.watch.step(samples=len(batch))   # outside `gpuscout watch`: does nothing

Steps are timed between calls (no device synchronisation is added: time per step is exact over
windows of a second or more, whatever the device queue holds at any moment).
In a notebook, or any code that trains in its own process: `with gpuscout.watching():` or
`model.fit(..., callbacks=[gpuscout.watch.callback()])` (gpuscout.watch.live).

The parent side (running the command, telemetry, the record and its verdict) is
gpuscout.watch.session; the instrumentation inside the script is gpuscout.child.watch_hook.
"""

from __future__ import annotations

from typing import Callable

_handler: Callable[[int | None], None] | None = None


def step(samples: int | None = None) -> None:
    """Mark the end of one training step of `samples` samples (a no-op outside `gpuscout watch`)."""
    if _handler is not None:
        _handler(samples)


def set_step_handler(handler: Callable[[int | None], None] | None) -> None:
    """Installed by the instrumentation that `gpuscout watch` injects into the script."""
    global _handler
    _handler = handler


def callback(label: str | None = None, *, store=None, show: bool = True):
    """A Keras callback that watches the fit it is given to, in this process (gpuscout.watch.live)."""
    from gpuscout.watch.live import callback as make

    return make(label, store=store, show=show)
