"""The timing protocol (methodology version 1, docs/methodology.md), framework-agnostic.

compile step (timed apart) -> warm-up steps (discarded) -> one calibration pass of
`window_steps` steps (discarded; it sets the window length) -> `windows` timing windows of equal step count, each at least `window_steps` steps and
`window_seconds` seconds. The device is synchronised only at window boundaries (the backend's
`sync` fetches the loss to the host), never per step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuscout.record.child import ChildResult, ChildWindow, DistributionDetails


@dataclass
class StepRunner:
    """What a backend hands the protocol: one compiled training step and its sync point."""

    step: Callable[[int], Any]  # dispatches training step i, returns a handle on its outputs
    sync: Callable[[Any], float]  # blocks until that step is done; returns the loss
    input_wait_s: Callable[[], float]  # cumulative host seconds spent waiting for input batches
    compiled: str  # a line saying what was compiled
    # Several processes training together (multi-worker) must run the same number of steps or
    # the last collective waits forever: this turns each one's window length into a common one.
    agree: Callable[[int], int] = lambda steps: steps
    # What the record keeps about the distribution and the model (record.child.DistributionDetails).
    details: dict = field(default_factory=dict)


def run_protocol(
    runner: StepRunner,
    *,
    batch_size: int,
    warmup_steps: int,
    windows: int,
    window_steps: int,
    window_seconds: float,
    on_event: Callable[[dict], None] = lambda event: None,
) -> ChildResult:
    step_index = 0

    def run_steps(count: int) -> float:
        nonlocal step_index
        handle = None
        for _ in range(count):
            handle = runner.step(step_index)
            step_index += 1
        return runner.sync(handle)

    start = time.monotonic()
    loss = run_steps(1)
    compile_s = time.monotonic() - start
    on_event({"event": "compiled", "compile_s": compile_s})

    # Warm-up, discarded. Then one calibration pass of `window_steps` steps, also discarded,
    # sets the window length: warm-up steps can be far slower than later ones (on an H200 the
    # first ResNet-50 warm-up steps ran ~8x slower while kernels were autotuned; docs/benchmarks.md),
    # so they cannot be used to estimate the step time.
    start = time.monotonic()
    if warmup_steps:
        run_steps(warmup_steps)
    warmup_s = time.monotonic() - start
    start = time.monotonic()
    loss = run_steps(window_steps)
    fixed_step_loss, fixed_steps = loss, step_index
    step_estimate_s = (time.monotonic() - start) / window_steps
    steps_per_window = runner.agree(max(window_steps, math.ceil(window_seconds / max(step_estimate_s, 1e-9))))
    on_event({"event": "warmed_up", "warmup_s": warmup_s, "steps_per_window": steps_per_window})

    measured: list[ChildWindow] = []
    for index in range(windows):
        wait_before = runner.input_wait_s()
        start = time.monotonic()
        loss = run_steps(steps_per_window)
        end = time.monotonic()
        window = ChildWindow(index=index, start_monotonic_s=start, end_monotonic_s=end, steps=steps_per_window,
                             samples=steps_per_window * batch_size,
                             input_wait_s=max(0.0, runner.input_wait_s() - wait_before))
        measured.append(window)
        on_event({"event": "window", "index": index, "of": windows, "throughput": window.samples / window.duration_s})
    return ChildResult(compile_s=compile_s, warmup_s=warmup_s, steps_per_window=steps_per_window, windows=measured,
                       loss=loss, fixed_step_loss=fixed_step_loss, fixed_steps=fixed_steps,
                       compiled=runner.compiled, distribution=DistributionDetails(**runner.details))

