"""Samples one GPU's telemetry from the parent process while the child measures.

Bounded rate (default 10 Hz) and no process-list calls inside the loop (those can take
milliseconds and stall the driver on some systems). Samples carry ``time.monotonic()`` stamps,
the same clock the child stamps its windows with, so the two can be aligned.
"""

from __future__ import annotations

import threading
import time

from gpuscout.telemetry.nvml import Nvml, Sample

DEFAULT_INTERVAL_S = 0.1
MIN_INTERVAL_S = 0.02


class Sampler:
    def __init__(self, nvml: Nvml, index: int, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._nvml = nvml
        self._index = index
        self.interval_s = max(interval_s, MIN_INTERVAL_S)
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuscout-telemetry", daemon=True)

    @property
    def gpu_name(self) -> str | None:
        """The sampled GPU's name as NVML reports it (a sweep trial keeps it)."""
        return self._nvml.gpu(self._index).name

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)
        return list(self._samples)

    def latest(self) -> Sample | None:
        """The newest sample so far (a live view reads it while sampling goes on)."""
        return self._samples[-1] if self._samples else None

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self._samples.append(self._nvml.sample(self._index))
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
