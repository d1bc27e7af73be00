"""The timing protocol (methodology version 1, docs/methodology.md), framework-agnostic.

compile step (timed apart) -> warm-up steps (discarded) -> one calibration pass of at least
`window_steps` steps and a fifth of a window (discarded; it sets the window length) -> `windows`
timing windows of equal step count, each at least `window_steps` steps and
`window_seconds` seconds. The device is synchronised only at window boundaries (the backend's
`sync` fetches the loss to the host), never per step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuscout.record.child import ChildResult, ChildWindow, DistributionDetails

# The calibration pass lasts at least this share of --window-seconds (docs/methodology.md, 6.)
CALIBRATION_SHARE = 0.2


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
    # More of it that only the run can tell, asked once after the last window (the compiled step's
    # collectives: reading them must not cost a timed step).
    details_after: Callable[[], dict] = dict


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
    # A pass of a few millisecond-steps is too short to time: one preemption of the process made
    # it 4x too slow on a loaded 2-core machine and the windows 4x too short. So it goes on in
    # doubling chunks until it has run CALIBRATION_SHARE of a window (after the fixed step, whose
    # loss stays comparable across runs), and the fastest chunk's step time sets the windows: a
    # preempted chunk is slow, never fast. Every worker of a multi-worker run must run the same
    # steps: each round's "more" is agreed (agree gives the ceiling of the mean: 2 if any asks 2).
    # A first pass shorter than a window always gets a second chunk: a preemption can make that pass
    # alone outlast CALIBRATION_SHARE, and then it would set the windows (a 50 ms stall in five 1 ms
    # steps on a loaded CPU: windows of 25 steps instead of ~250; tests/unit/test_protocol.py).
    step_times = [(time.monotonic() - start) / window_steps]
    chunk = window_steps

    def more() -> bool:
        elapsed = time.monotonic() - start
        return elapsed < CALIBRATION_SHARE * window_seconds or (len(step_times) == 1 and elapsed < window_seconds)

    while runner.agree(2 if more() else 1) == 2:
        chunk_start = time.monotonic()
        run_steps(chunk)
        step_times.append((time.monotonic() - chunk_start) / chunk)
        chunk *= 2
    step_estimate_s = min(step_times)
    steps_per_window = runner.agree(max(window_steps, math.ceil(window_seconds / max(step_estimate_s, 1e-9))))
    on_event({"event": "warmed_up", "warmup_s": warmup_s, "steps_per_window": steps_per_window})

    measured: list[ChildWindow] = []
    for index in range(windows):
        wait_before = runner.input_wait_s()
        start = time.monotonic()
        loss = run_steps(steps_per_window)
        end = time.monotonic()
        window = ChildWindow(
            index=index,
            start_monotonic_s=start,
            end_monotonic_s=end,
            steps=steps_per_window,
            samples=steps_per_window * batch_size,
            input_wait_s=max(0.0, runner.input_wait_s() - wait_before),
        )
        measured.append(window)
        on_event({"event": "window", "index": index, "of": windows, "throughput": window.samples / window.duration_s})
    return ChildResult(
        compile_s=compile_s,
        warmup_s=warmup_s,
        steps_per_window=steps_per_window,
        windows=measured,
        loss=loss,
        fixed_step_loss=fixed_step_loss,
        fixed_steps=fixed_steps,
        compiled=runner.compiled,
        distribution=DistributionDetails(**runner.details, **runner.details_after()),
    )
