"""Warnings attached to a run: typed values that carry the hint of what to do next.

Thresholds (docs/methodology.md):
- high_variance: coefficient of variation across windows above 2% (DESIGN.md).
- slow_first_window: the first window more than 5% below the median of the others, the
  analogue of hyperfine's "first run was significantly slower" warning.
- throttled: a thermal or hardware slowdown reason during a window; the software power cap
  only when it cost clock (mean SM clock under 97% of the maximum: an H200 at full load reports
  the power-cap reason while running at 99.5% of its maximum clock, docs/benchmarks.md); or a
  mean SM clock under 90% of the maximum whatever the reason.
- gpu_shared: other compute processes on the GPU before, during or after the run.
- straggler: on a run over several GPUs, one GPU's mean SM clock under 95% of the fastest's, or
  slowdown reasons on it alone. Synchronous data parallelism runs at the pace of its slowest
  replica; healthy GPUs of one model at full load sit within ~1% of their maximum clock (an H200
  at 99.5%, docs/benchmarks.md), so 5% apart is one of them held back.
- input_bound: the training loop waited for input more than 5% of the window time (the
  TensorFlow profiler's bands: < 5% not, 5-20% moderately, > 20% highly input-bound).
"""

from __future__ import annotations

import statistics

from gpuscout.record.run import Flag, Telemetry

HIGH_VARIANCE_CV = 0.02
SLOW_FIRST_WINDOW = 0.05
THROTTLE_CLOCK_SHARE = 0.90
POWER_CAP_CLOCK_SHARE = 0.97
STRAGGLER_CLOCK_SHARE = 0.95
INPUT_BOUND_MODERATE = 0.05
INPUT_BOUND_HIGH = 0.20


def variance_flags(throughputs: list[float], cv: float | None) -> list[Flag]:
    flags = []
    if cv is not None and cv > HIGH_VARIANCE_CV:
        flags.append(
            Flag(
                code="high_variance",
                message=f"throughput varied by {cv:.1%} (CV) across windows",
                hint="close other programs using this GPU/CPU, raise --windows or --window-seconds, "
                "and check the throttled flag",
            )
        )
    if len(throughputs) >= 3:
        median_rest = statistics.median(throughputs[1:])
        if throughputs[0] < (1 - SLOW_FIRST_WINDOW) * median_rest:
            flags.append(
                Flag(
                    code="slow_first_window",
                    message=f"the first window was {1 - throughputs[0] / median_rest:.0%} slower than the others",
                    hint="warm-up was too short for this workload: raise --warmup-steps",
                )
            )
    return flags


def throttle_flag(
    slowdown_reasons: list[str], sm_clock_mean_mhz: float | None, sm_clock_max_mhz: int | None
) -> Flag | None:
    share = sm_clock_mean_mhz / sm_clock_max_mhz if sm_clock_mean_mhz is not None and sm_clock_max_mhz else None
    reasons = [r for r in slowdown_reasons if r != "sw_power_cap"]
    if "sw_power_cap" in slowdown_reasons and (share is None or share < POWER_CAP_CLOCK_SHARE):
        reasons.append("sw_power_cap")
    low_clock = share is not None and share < THROTTLE_CLOCK_SHARE
    if not reasons and not low_clock:
        return None
    parts = []
    if reasons:
        parts.append("slowdown reasons " + ", ".join(sorted(reasons)))
    if share is not None:
        parts.append(f"mean SM clock {sm_clock_mean_mhz:.0f} MHz of {sm_clock_max_mhz} MHz max")
    return Flag(
        code="throttled",
        message="the GPU was throttled during the windows: " + "; ".join(parts),
        hint="numbers reflect this card's cooling and power limit; check airflow and "
        "`nvidia-smi -q -d PERFORMANCE` before comparing with another machine",
    )


def shared_flag(other_pids: list[int]) -> Flag | None:
    if not other_pids:
        return None
    pids = ", ".join(str(p) for p in sorted(set(other_pids)))
    return Flag(
        code="gpu_shared",
        message=f"other compute processes used this GPU (pids {pids})",
        hint="stop them (see `nvidia-smi`) or pick an idle GPU with --gpu",
    )


def straggler_flag(per_gpu: list[Telemetry]) -> Flag | None:
    """`per_gpu`: telemetry summaries, each with the GPU's `index` (analysis/derive.py)."""
    if len(per_gpu) < 2:
        return None
    clocks = {t.index: t.sm_clock_mean_mhz for t in per_gpu if t.sm_clock_mean_mhz}
    fastest = max(clocks.values(), default=None)
    slow = {i: c for i, c in clocks.items() if c < STRAGGLER_CLOCK_SHARE * fastest}
    reasons = {t.index: t.slowdown_reasons for t in per_gpu if t.slowdown_reasons}
    alone = {i: r for i, r in reasons.items() if len(reasons) < len(per_gpu)}
    culprits = sorted(set(slow) | set(alone))
    if not culprits:
        return None
    parts = []
    for i in culprits:
        why = [f"{clocks[i]:.0f} MHz mean SM clock against {fastest:.0f} MHz on the fastest"] if i in slow else []
        why += [f"slowdown reasons {', '.join(alone[i])}"] if i in alone else []
        parts.append(f"GPU {i}: {'; '.join(why)}")
    return Flag(
        code="straggler",
        message="a straggler held the other GPUs back: " + "; ".join(parts),
        hint="synchronous training runs at the pace of its slowest GPU: check that GPU's cooling and power "
        "(`nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i N`), or leave it out with `gpuscout scale --gpus`",
    )


def input_flag(input_wait_share: float | None) -> Flag | None:
    if input_wait_share is None or input_wait_share <= INPUT_BOUND_MODERATE:
        return None
    band = "highly" if input_wait_share > INPUT_BOUND_HIGH else "moderately"
    return Flag(
        code="input_bound",
        message=f"{band} input-bound: {input_wait_share:.0%} of step time waiting for input",
        hint="parallelise and prefetch the input pipeline (tf.data AUTOTUNE), cache decoded "
        "data, or compare with --data synthetic to see what the model alone reaches",
    )


def loss_flag(loss: float | None) -> Flag | None:
    if loss is None or loss == loss and abs(loss) != float("inf"):
        return None
    return Flag(
        code="loss_not_finite",
        message=f"the training loss became {loss}",
        hint="this precision broke training: use mixed_float16 with loss scaling, mixed_bfloat16, or fp32",
    )
