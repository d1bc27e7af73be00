"""Telling an out-of-memory failure from any other, by the text the framework left behind."""

from __future__ import annotations

import re

# Messages seen from XLA/JAX ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"),
# TensorFlow ("OOM when allocating tensor"), CUDA ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
# and the host allocator (MemoryError).
_OOM = re.compile(
    r"RESOURCE_EXHAUSTED|out of memory|OOM when allocating|CUDA_ERROR_OUT_OF_MEMORY|MemoryError",
    re.IGNORECASE,
)


def classify_failure(text: str) -> str:
    """Return "oom" when the text reports running out of memory, else "failed"."""
    return "oom" if _OOM.search(text or "") else "failed"
