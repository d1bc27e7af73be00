"""The timing protocol's calibration pass against a preempted step (child/protocol.py)."""

import math
import time

from gpuscout.child.protocol import StepRunner, run_protocol


def sleeping_runner(slow_step: int, slow_s: float, step_s: float = 0.001) -> tuple[StepRunner, list[tuple[int, float]]]:
    """A runner whose steps sleep; `done` gets each step's index and the monotonic time it ended."""
    done: list[tuple[int, float]] = []

    def step(i: int):
        time.sleep(slow_s if i == slow_step else step_s)
        done.append((i, time.monotonic()))
        return i

    return StepRunner(step=step, sync=lambda handle: 1.0, input_wait_s=lambda: 0.0, compiled="sleeps"), done


def test_a_preempted_calibration_step_does_not_shorten_the_windows():
    # step 1 (the first of the calibration pass: step 0 is the compile step, no warm-up) is held 50 ms,
    # as a preemption would: timed alone, the 5-step pass says ~11 ms a step and windows of 0.3 s
    # would get 28 steps, about 30 ms. The fastest later chunk says ~1 ms: windows of ~270 steps.
    # Both are the CPU's to say: beside the suite's other worker its 1 ms sleeps overshot to 2.4 ms a
    # step through the whole calibration and the protocol rightly sized 126 (a fixed ">= 150" failed
    # there). So the windows are held against the 5-step pass as it ran in the same test: at least 3x
    # the steps that pass alone would have given (about 10x on a quiet CPU, 5x at 2.4 ms a sleep).
    runner, done = sleeping_runner(slow_step=1, slow_s=0.05)
    result = run_protocol(runner, batch_size=8, warmup_steps=0, windows=2, window_steps=5, window_seconds=0.3)
    first_pass_step_s = (done[5][1] - done[0][1]) / 5  # steps 1-5, after the compile step 0
    assert result.steps_per_window >= 3 * math.ceil(0.3 / first_pass_step_s)
    assert all(w.end_monotonic_s - w.start_monotonic_s >= 0.15 for w in result.windows)
    # the loss kept for comparisons is still the one after the compile step and the first 5 steps
    assert result.fixed_steps == 6
    calibration = len(done) - 1 - 2 * result.steps_per_window
    assert calibration >= 5 + 5  # the pass went on past its first 5 steps, in doubling chunks


def test_a_step_as_long_as_the_window_needs_no_more_calibration():
    runner, done = sleeping_runner(slow_step=-1, slow_s=0.0, step_s=0.02)
    result = run_protocol(runner, batch_size=8, warmup_steps=0, windows=1, window_steps=5, window_seconds=0.05)
    assert len(done) == 1 + 5 + result.steps_per_window  # 5 steps of 20 ms already last 2x a fifth of 0.05 s
    assert result.steps_per_window == 5
