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
`model.fit(..., callbacks=[gpuscout.callback()])` (gpuscout.notebook.live: it shows what it
measured, which a verb's floor cannot).

The parent side (running the command, telemetry, the record and its verdict) is
gpuscout.measure.watching; the instrumentation inside the script is gpuscout.child.watch_hook.
"""

from __future__ import annotations

from gpuscout.core.steps import step  # the public name: gpuscout.watch.step()

__all__ = ["step"]


def __getattr__(name: str):
    if name == "callback":  # its name until 2026-11-28: the notebook floor's, which shows what it measured
        raise AttributeError(
            "gpuscout.watch.callback() is now gpuscout.callback(): model.fit(..., callbacks=[gpuscout.callback()])"
        )
    raise AttributeError(f"module 'gpuscout.watch' has no attribute {name!r}")
