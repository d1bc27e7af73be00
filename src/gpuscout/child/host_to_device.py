"""How a served request's input reaches the GPU on the jax backend, chosen per batch shape by timing.

`jax.device_put` of a pageable numpy array copies it on one thread into a staging buffer before
the DMA; on an H100 that ran at half the rate of torch's `.cuda()` (docs/benchmarks.md, inference
breakdown), which was all of gpuscout's gap to torch.compile at large batches. Which way is
fastest depends on the host, the driver and the batch's size, so, like cuDNN's autotuner,
`JaxStager.choose` times each candidate on the real input after the compile and keeps the fastest
for that shape; the run records the timings. Candidates:

- direct: `jax.device_put(x, device)`.
- pinned: into page-locked host memory first (`memory_kind="pinned_host"`), then one DMA.
- split4: four slices put from four threads at once (the staging copies run in parallel where
  the runtime releases the GIL), joined on the device by the compiled forward pass.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

SPLITS = 4
TRIES = 5  # timed puts per candidate; the median decides


class JaxStager:
    def __init__(self, jax, device) -> None:
        self._jax = jax
        self._device = device
        self._pinned = self._on_device = None
        if "pinned_host" in {m.kind for m in device.addressable_memories()}:
            self._pinned = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
            # a pinned-host array moves to the device only under a sharding that names device memory
            self._on_device = jax.sharding.SingleDeviceSharding(device, memory_kind="device")
        self._pool = ThreadPoolExecutor(SPLITS, thread_name_prefix="gpuscout-h2d")
        self._chosen: dict[tuple, str] = {}

    def candidates(self, batch: int) -> list[str]:
        split = ["split4"] if batch >= SPLITS else []  # a smaller batch has nothing to split
        return ["direct"] + (["pinned"] if self._pinned is not None else []) + split

    def put(self, x: np.ndarray, method: str | None = None) -> list:
        """The input as a list of device arrays (one, or the slices to join)."""
        method = method or self._chosen.get((x.shape, x.dtype.str), "direct")
        jax = self._jax
        if method == "pinned":
            return [jax.device_put(jax.device_put(x, self._pinned), self._on_device)]
        if method == "split4" and len(x) >= SPLITS:
            return list(self._pool.map(lambda part: jax.device_put(part, self._device), np.array_split(x, SPLITS)))
        return [jax.device_put(x, self._device)]

    def choose(self, x: np.ndarray) -> dict:
        """Times each candidate's copy (until the arrays are on the device) and keeps the fastest."""
        timings = {}
        for method in self.candidates(len(x)):
            spans = []
            for _ in range(TRIES + 1):  # the first of each warms its path
                start = time.monotonic()
                for part in self.put(x, method):
                    part.block_until_ready()
                spans.append(time.monotonic() - start)
            timings[method] = statistics.median(spans[1:])
        best = min(timings, key=timings.get)
        self._chosen[(x.shape, x.dtype.str)] = best
        return {"method": best, "copy_ms": {m: round(s * 1000, 4) for m, s in timings.items()}}
