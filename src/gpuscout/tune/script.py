"""`gpuscout tune -- COMMAND`: each fix applied to the user's unchanged script, and measured.

The command runs once as the baseline under watch's instrumentation, then once per change that
a run's facts make worth trying (this module: `plan`), each change injected at interpreter
start-up through the same hook (child/tune_overrides.py; no file is edited), in rounds on top of
the fastest change so far (tune/search.py), each setting judged against the runs of its
reference beside it (`judged`). Every run is a watch record of its own (`tune_change`,
`applied`), all of one session (`group_id`).

Each run is bounded by the same number of training steps after the first compile: the first
baseline runs TARGET_TRAINING_S of training and its step count is every later run's `--steps`
(or the user's `--steps`), cut into WINDOWS_PER_RUN windows of equal steps, so that every run
has as many windows whatever a change buys. Loss is compared at that equal step count: a change
whose last loss is NaN/inf, or clearly worse than the baseline's, is flagged and never
recommended (mixed_float16 overflowing is the usual case).

The search is bounded as DeepSpeed's autotuner bounds its own: by what the baseline showed (a
change is tried only where its cause was seen) and by memory (a larger batch only where the
measured peak says it fits), and the whole session by --budget-minutes.
"""

from __future__ import annotations

import math

from gpuscout.analysis import devices as devices_analysis
from gpuscout.analysis.device_causes import BF16_CC, FP16_CC
from gpuscout.analysis.untimed import STARVED_UTIL_PCT
from gpuscout.analysis.verdict import INPUT_BOUND_SHARE, INPUT_HIGHLY, OUTSIDE_STEP_SHARE
from gpuscout.core.errors import UsageError
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import input_changes
from gpuscout.tune.augment import augment_in_model
from gpuscout.tune.change import CHANGES, INPUT_FIRST, Change, Deferred, Plan, Skip
from gpuscout.tune.larger_batch import epoch_steps, fit_batches, larger_batches, learning_rate

# Training time the first baseline runs (after its compile) to set every run's step count: a
# warm-up window and at least 4 steady windows of WINDOW_S even for a change 4x faster.
TARGET_TRAINING_S = 10.0
# Training a round's runs are sized to at their reference's pace (tune/search.py Steps): 8 windows of
# 0.6 s measure a compiled step to a few percent, and a round of six candidates costs a minute, not two
# (on an H100, rounds of 10 s left a debugging-settings ViT at 0.28 of the fix by hand, its third
# round unrun for the budget; docs/benchmarks.md).
ROUND_TRAINING_S = 5.0
WINDOW_S = 0.5
# Every later run has the baseline's steps, cut into this many windows of equal steps: a warm-up
# window and seven steady ones, however fast a change makes the run (a 15x faster jit_compile
# would otherwise leave one window of half a second).
WINDOWS_PER_RUN = 8
# Whole epochs each run trains at least, where the script's epochs are short enough (budget.
# Steps): the first (its compile) and three steady ones, what judging.MIN_EPOCHS pools on a
# candidate's side from its one run; and the most training those may take: longer epochs and the
# runs count steps, judged by their windows (a session of twenty runs of 16 s is 5 of its 6 minutes).
MIN_RUN_EPOCHS = 4
EPOCH_RUN_AT_MOST_S = 16.0
# Fewer steps than this per run and no change can be told from noise: each later run gets at least
# this many even when the baseline's TARGET_TRAINING_S ran fewer (an op-by-op ResNet-50: 2 s a step)
MIN_STEPS = 32
# A step shorter than this is worth batching host calls for (steps_per_execution): Keras' own
# guidance puts the overhead of one host round trip per step at milliseconds.
SHORT_STEP_S = 0.025

# What mixed precision buys the device's share of a step at most (bf16 against float32's TF32 tensor
# cores: about 2x on Hopper, the H100 ViT measured 1.88x), and the least whole-step gain worth a run:
# a loop waiting 94% for its input ran 0.77x with it (H100, docs/benchmarks.md), a run for nothing
PRECISION_MOST = 2.0
PRECISION_WORTH = 1.1


def check_names(names: tuple[str, ...], option: str) -> None:
    unknown = [n for n in names if n not in CHANGES]
    if unknown:
        raise UsageError(f"{option}: unknown change {', '.join(map(repr, unknown))}: choose from {', '.join(CHANGES)}")


def plan(
    baseline: WatchRecord, only: tuple[str, ...] = (), skip: tuple[str, ...] = (), script_batch: int | None = None
) -> Plan:
    """The changes the baseline's facts make worth trying, and why each of the others is not.
    `script_batch`: the batch the script itself trains with, where `baseline` is a setting that
    changed it already (a larger batch is named by its factor over the script's)."""
    main = baseline.main
    out = Plan()
    if main is None or main.custom or not baseline.windows:
        out.skipped.append(Skip("all", "the baseline ran no timed Keras fit step"))
        return out
    for knob, found in (
        ("jit_compile", _jit(baseline)),
        ("mixed_precision", _precision(baseline)),
        ("steps_per_execution", _steps_per_execution(baseline)),
        ("workers", input_changes.workers(baseline)),
        ("cache", input_changes.cache(baseline)),
        ("prefetch", input_changes.prefetch(baseline)),
        ("device_batches", input_changes.device_batches(baseline)),
        ("augment_in_model", augment_in_model(baseline)),
        ("batch_size", larger_batches(baseline, script_batch)),
        ("data_parallel", _data_parallel(baseline)),
    ):
        if only and knob not in only:
            continue
        if knob in skip:
            out.skipped.append(Skip(knob, "--skip"))
        elif isinstance(found, str):
            out.skipped.append(Skip(knob, found))
        elif isinstance(found, Deferred):
            out.skipped.append(Skip(knob, found.reason))
            out.deferred += found.changes
        else:
            out.changes += found
    if (baseline.input_wait_share or 0) >= INPUT_HIGHLY:  # the input caps the step: its fixes first
        out.changes.sort(key=lambda c: INPUT_FIRST.index(c.knob) if c.knob in INPUT_FIRST else len(INPUT_FIRST))
    elif baseline.gpu_idle_share is not None and 1 - baseline.gpu_idle_share < STARVED_UTIL_PCT / 100:
        # a GPU idle most of the time waits on the host's calls, not the input: more work per call first
        out.changes.sort(
            key=lambda c: MORE_WORK_FIRST.index(c.knob) if c.knob in MORE_WORK_FIRST else len(MORE_WORK_FIRST)
        )
    if baseline.verdict and baseline.verdict[0].code == "devices_unused":  # the idle devices the largest saving:
        out.changes.sort(key=lambda c: c.knob != "data_parallel")  # spread first: the budget may end the round
    return out


# A compiled step of a small batch left the H100 idle 70-80% of the time (the debugging-settings
# ViT, docs/benchmarks.md): the largest batch tried first, where a budget may end the round
MORE_WORK_FIRST = ("jit_compile", "batch_size", "steps_per_execution", "device_batches")


def _jit(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.run_eagerly:  # the debugging setting that compiles nothing, on either backend
        return _graph(r)
    if main.jit_compile:
        return "the step is XLA-compiled already"
    if main.backend == "tensorflow" and r.gpu is None:
        return (
            "Keras turns XLA off on a CPU-only TensorFlow, where it loses (0.10x of fit, docs/benchmarks.md); "
            "the script runs what Keras chose"
        )
    if main.backend == "tensorflow" and main.strategy:
        return f"Keras does not XLA-compile under {main.strategy}"
    return [
        Change(
            "jit_compile",
            "jit_compile",
            {"jit_compile": True},
            "model.compile(..., jit_compile=True)",
            f"the step runs without XLA on {main.backend} (jit_compile=False)",
        )
    ]


def _graph(r: WatchRecord) -> list[Change]:
    """A model left with run_eagerly=True: every step runs op by op in Python (Keras' debugging
    mode). The step compiled again, with XLA where Keras would use it (jax; TensorFlow on a GPU
    outside tf.distribute), else as TensorFlow's graph: the same pace-multiplying change as
    jit_compile, measured first (search.PACE_FIRST)."""
    main = r.main
    xla = main.backend == "jax" or (r.gpu is not None and not main.strategy)
    settings = {"run_eagerly": False, **({"jit_compile": True} if xla else {})}
    line = (
        "model.compile(..., run_eagerly=False"
        + (", jit_compile=True)" if xla else ")")
        + "   # and no `model.run_eagerly = True`"
    )
    return [
        Change(
            "jit_compile" if xla else "run_eagerly_false",
            "jit_compile",
            settings,
            line,
            f"the step runs eagerly (run_eagerly=True): op by op in Python, on {main.backend}",
        )
    ]


def _precision(r: WatchRecord) -> list[Change] | Deferred | str:
    main = r.main
    cc = float(r.gpu.compute_capability) if r.gpu and r.gpu.compute_capability else None
    if r.gpu is None:
        return "no GPU: mixed precision buys nothing on a CPU"
    if main.precision_policy not in (None, "float32"):
        return f"the script sets its own policy ({main.precision_policy})"
    if cc is None or cc < FP16_CC:
        return f"the GPU has no tensor cores for fp16/bf16 (compute capability {r.gpu.compute_capability or '?'})"
    policy = "mixed_bfloat16" if cc >= BF16_CC else "mixed_float16"
    change = Change(
        "mixed_precision",
        "mixed_precision",
        {"mixed_precision": policy},
        f"keras.mixed_precision.set_global_policy('{policy}')   # before building the model",
        f"float32 on a GPU with {'bf16' if cc >= BF16_CC else 'fp16'} tensor cores (compute capability "
        f"{r.gpu.compute_capability})",
    )
    wait = r.input_wait_share or 0
    most = 1 / (1 - (1 - wait) * (1 - 1 / PRECISION_MOST))
    if most < PRECISION_WORTH:
        return Deferred(
            [change],
            f"the loop waits for input {wait:.0%} of the time: faster arithmetic could buy at most {most:.2f}x "
            "on its own; measured only with a change to the input (on top of one kept, or beside one)",
        )
    return [change]


def _steps_per_execution(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if (main.steps_per_execution or 1) > 1:
        return f"already steps_per_execution={main.steps_per_execution}"
    if main.jit_compile is False and main.backend == "jax":  # (tensorflow still runs a tf.function graph)
        return (
            "the step runs op by op (jit_compile=False): batching host calls comes after compiling it "
            "(measured on an H100: 38x from jit_compile, docs/benchmarks.md)"
        )
    if (r.input_wait_share or 0) >= INPUT_BOUND_SHARE and not any(c.code == "input_handover" for c in r.verdict):
        return f"the loop waits for input ({r.input_wait_share:.0%} of the time): fewer host calls would not feed it"
    host = (r.outside_step_share or 0) >= OUTSIDE_STEP_SHARE or any(
        c.code in ("host_bound", "input_handover") for c in r.verdict
    )
    if (r.step_time_s or 1) >= SHORT_STEP_S and not host:
        return f"steps of {r.step_time_s * 1000:.0f} ms, and the loop is not host-bound: one call per step costs little"
    why = f"steps of {r.step_time_s * 1000:.1f} ms" + (" and a host-bound loop" if host else "")
    tiles = tiling(main)
    if isinstance(tiles, str):
        return tiles
    values, epoch = tiles
    return [
        Change(
            f"steps_per_execution_{n}",
            "steps_per_execution",
            {"steps_per_execution": n},
            f"model.compile(..., steps_per_execution={n})",
            why + (f"; {n} divides {epoch}" if epoch else ""),
        )
        for n in values
    ]


# The values of steps_per_execution tried: 8 and 32 host calls' worth of steps in one (Keras' guide
# suggests values in the tens), each the nearest that tiles the epoch; never above SPE_MOST.
SPE_TARGETS = (8, 32)
SPE_MOST = 64


def tiling(main) -> tuple[list[int], str | None] | str:
    """steps_per_execution values that keep the epoch the script's: Keras 3 runs an epoch as
    range(0, steps, steps_per_execution) calls of steps_per_execution steps each
    (trainers/epoch_iterator.py), so from an input that never runs out (a generator, a repeated
    tf.data) a value that does not divide steps_per_epoch trains more steps an epoch (40 at 32 a
    call: 64), and one that does not divide the data's batches ends each epoch early and calls
    on_epoch_end twice; validation_steps likewise. Returns the values and what they divide, or why
    none does."""
    epoch = main.steps_per_epoch or next((e.steps for e in main.epochs), None)
    validation = main.validation_steps
    if not epoch and not validation:  # an input of unknown length, read to its end: any value ends with it
        return list(SPE_TARGETS), None
    common = math.gcd(epoch or 0, validation or 0)
    divisors = [d for d in range(2, min(common, SPE_MOST) + 1) if common % d == 0]
    what = " and ".join(
        part
        for part in (
            f"the epoch's {epoch} steps" if epoch else None,
            f"the validation's {validation} steps" if validation else None,
        )
        if part
    )
    if not divisors:
        return (
            f"no steps_per_execution from 2 to {SPE_MOST} divides {what}: any would change the steps an "
            "epoch trains (Keras runs whole calls of it)"
        )
    values = []
    for target in SPE_TARGETS:
        below = [d for d in divisors if d <= target]
        value = below[-1] if below else divisors[0]
        if value not in values:
            values.append(value)
    return values, what


def _data_parallel(r: WatchRecord) -> list[Change] | str:
    """The step on every device the framework sees, set before the first layer is built (jax:
    keras.distribution.DataParallel; TensorFlow: a MirroredStrategy made the default strategy):
    with the global batch as it is (each device a 1/N share), and, where fit takes in-memory
    arrays, N times larger (each device the batch one had). Measured as samples/s against the
    one-device runs beside it, like every change."""
    main = r.main
    devices = main.devices or 1
    if devices < 2:
        return f"{main.backend} sees one device" if main.devices else "the devices the framework sees are not known"
    if main.replicas >= devices:
        return f"the step runs on all {devices} devices already ({main.strategy})"
    why = f"{main.backend} sees {devices} devices; the step ran on {main.replicas}"
    code = devices_analysis.spread_code(main.backend)
    out = [
        Change(
            "data_parallel",
            "data_parallel",
            {"data_parallel": True},
            code + f"\n# the global batch as it is: each device computes 1/{devices} of it",
            why,
        )
    ]
    if fit_batches(main):
        bigger = main.batch_size * devices
        rate = learning_rate(main, devices, epoch_steps(main, bigger))
        out.append(
            Change(
                "data_parallel_batch",
                "data_parallel",
                {"data_parallel": True, "batch_size": bigger, **rate.settings},
                f"{code}\nmodel.fit(..., batch_size={bigger})   # {devices} x {main.batch_size}: "
                f"each device the batch one had" + rate.line.replace("   # and", ";", 1),
                f"{why}; the global batch {devices} times larger, the learning rate scaled for it",
            )
        )
    return out
