"""jax's persistent compilation cache for a run, and what it gave the run (child side).

A sweep's trials share one folder: the programs every trial compiles alike (each weight's
initializer, Keras' zero-filled slots; the whole train step when only a learning rate or a seed
changes) are compiled by the first trial and loaded by the others. jax counts its cache's work
through jax.monitoring (jax/_src/compiler.py, compile_or_get_cached: the events below).
"""

from __future__ import annotations

from gpuscout.record.child import CompilationCacheUse

REQUESTS = "/jax/compilation_cache/compile_requests_use_cache"
HITS = "/jax/compilation_cache/cache_hits"

_counts = {REQUESTS: 0, HITS: 0}
_started = [False]


def start(folder: str) -> None:
    """Compile through the cache in `folder`: every program, however quick to compile (jax keeps
    only those over 1 s by default, jax_persistent_cache_min_compile_time_secs; a model's
    initializers take well under a second each, and there are dozens)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # no size floor either
    jax.monitoring.register_event_listener(_on_event)
    _started[0] = True


def _on_event(event: str, **kwargs) -> None:
    if event in _counts:
        _counts[event] += 1


def use() -> CompilationCacheUse | None:
    """What the cache gave this run; None when the run had none (`start` was not called)."""
    return CompilationCacheUse(programs=_counts[REQUESTS], hits=_counts[HITS]) if _started[0] else None
