"""The step mark: the one call a script's own training loop makes into gpuscout
(`gpuscout.watch.step()`), and the handler the instrumentation installs behind it
(gpuscout.child.watch_hook). It stands on the ground floor because both sides import it: the
public name in gpuscout.watch and the instrumentation in gpuscout.child, which may not import
each other (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable

_handler: Callable[[int | None], None] | None = None


def step(samples: int | None = None) -> None:
    """Mark the end of one training step of `samples` samples (a no-op outside `gpuscout watch`)."""
    if _handler is not None:
        _handler(samples)


def set_step_handler(handler: Callable[[int | None], None] | None) -> None:
    """Installed by the instrumentation that `gpuscout watch` injects into the script."""
    global _handler
    _handler = handler
