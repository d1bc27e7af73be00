"""A watched fit's timed windows: which lead as warm-up, and the figures of the steady ones (step
time, input wait, samples/s with its interval, MFU)."""

from __future__ import annotations

from statistics import median
from typing import Any

from gpuscout.analysis.device_causes import precision_of
from gpuscout.analysis.flags import SLOW_FIRST_WINDOW
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout.analysis.stats import summarize
from gpuscout.catalog.specs import GpuSpec
from gpuscout.core.watch_events import Window
from gpuscout.record.run import Throughput
from gpuscout.record.watch import WatchedFit, WatchWindow

# A leading window counts as warm-up while its step time is more than this slower than the median
# of the windows after it: bench's slow-first-window threshold (analysis/flags.py).
SETTLED = 1 + SLOW_FIRST_WINDOW


# Warm-up is left out only where this many windows stay: a short fit keeps them all, and says so.
MIN_STEADY_WINDOWS = 3


def warmup_windows(windows: list[WatchWindow]) -> int:
    """How many leading windows are warm-up: the first after the compile (a step's first runs
    meet cold caches, autotuning and allocations: two identical watched ResNet-50 runs gave 95%
    CIs of 4,240-5,403 img/s with it), then any more until the step time settles."""
    if len(windows) < 1 + MIN_STEADY_WINDOWS:
        return 0
    count = 1
    while len(windows) - count > MIN_STEADY_WINDOWS:
        rest = sorted(w.step_time_s for w in windows[count + 1 :])
        if windows[count].step_time_s <= SETTLED * median(rest):
            break
        count += 1
    return count


def traced_notes(windows: list[WatchWindow]) -> list[str]:
    traced = [w for w in windows if w.traced]
    if not traced:
        return []
    return [
        f"the {sum(w.steps for w in traced)} traced steps (--trace-steps) are left out of the figures: "
        "the profiler slows them"
    ]


def warmup_notes(windows: list[WatchWindow], warmup: int) -> list[str]:
    if windows and not warmup:
        return [
            f"{len(windows)} timing window(s) only: none was left out as warm-up, so the figures include it "
            f"(watch longer, or --steps, for {1 + MIN_STEADY_WINDOWS} or more)"
        ]
    return []


def window_of(e: Window) -> WatchWindow:
    seconds = e.end_monotonic_s - e.start_monotonic_s
    return WatchWindow(
        index=e.index,
        start_monotonic_s=e.start_monotonic_s,
        end_monotonic_s=e.end_monotonic_s,
        steps=e.steps,
        samples=e.samples,
        input_wait_s=e.input_wait_s,
        outside_step_s=e.outside_step_s,
        seconds=seconds,
        samples_per_s=e.samples / seconds if e.samples and seconds > 0 else None,
        step_time_s=seconds / e.steps if e.steps else seconds,
        traced=e.traced,
        loss=e.loss,
    )


def throughput_of(main: WatchedFit | None, entry: GpuSpec | None, steady: list[WatchWindow]) -> dict[str, Any]:
    """The figures of `steady`, the main fit's windows after its warm-up."""
    if main is None or not steady:
        return {}
    counted = [w for w in steady if w.samples_per_s is not None]
    seconds = sum(w.seconds for w in steady)
    waits = [w.input_wait_s for w in steady if w.input_wait_s is not None]
    outside = [w.outside_step_s for w in steady if w.outside_step_s is not None]
    out: dict[str, Any] = {
        "step_time_s": seconds / sum(w.steps for w in steady),
        "input_wait_share": sum(waits) / seconds if waits and seconds else None,
        "outside_step_share": sum(outside) / seconds if outside and seconds else None,
    }
    if counted:
        summary = summarize([w.samples_per_s for w in counted])
        out.update(throughput=Throughput(**summary.to_dict(), unit="samples/s"), windows_samples_per_s=summary.median)
        if main.forward_flops_per_sample:
            achieved = achieved_tflops(3 * main.forward_flops_per_sample, summary.median)
            utilisation, peak, _ = mfu(achieved, entry, precision_of(main.precision_policy))
            out.update(achieved_tflops=achieved, mfu=utilisation, mfu_peak_tflops=peak)
    return out
