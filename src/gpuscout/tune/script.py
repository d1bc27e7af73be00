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
measured peak says it fits), and the whole session by --budget.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from gpuscout.analysis import devices as devices_analysis
from gpuscout.analysis import repeats
from gpuscout.analysis.compare import contrast
from gpuscout.analysis.untimed import STARVED_UTIL_PCT
from gpuscout.analysis.verdict import (
    BF16_CC,
    FP16_CC,
    INPUT_BOUND_SHARE,
    INPUT_HIGHLY,
    OUTSIDE_STEP_SHARE,
)
from gpuscout.core.errors import UsageError
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.augment import augment_in_model
from gpuscout.tune.change import Change, Plan, Skip

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
# Fewer steps than this per run and no change can be told from noise: each later run gets at least
# this many even when the baseline's TARGET_TRAINING_S ran fewer (an op-by-op ResNet-50: 2 s a step)
MIN_STEPS = 32
# A step shorter than this is worth batching host calls for (steps_per_execution): Keras' own
# guidance puts the overhead of one host round trip per step at milliseconds.
SHORT_STEP_S = 0.025
# The loss a change may end at, against the baseline's at equal steps, before it is "clearly worse".
LOSS_WORSE_RATIO = 1.5
LOSS_WORSE_ABSOLUTE = 0.1
# Memory a larger batch may plan to use, of the GPU's (the rest: fragmentation, the framework's own).
BATCH_MEMORY_SHARE = 0.9
# Two runs of the same setting farther apart than this (their medians) say the machine was noisy.
NOISY_SHARE = 0.10

# What mixed precision buys the device's share of a step at most (bf16 against float32's TF32 tensor
# cores: about 2x on Hopper, the H100 ViT measured 1.88x), and the least whole-step gain worth a run:
# a loop waiting 94% for its input ran 0.77x with it (H100, docs/benchmarks.md), a run for nothing
PRECISION_MOST = 2.0
PRECISION_WORTH = 1.1

CHANGES = ("jit_compile", "mixed_precision", "steps_per_execution", "workers", "cache", "prefetch",
           "device_batches", "augment_in_model", "batch_size", "data_parallel")


def check_names(names: tuple[str, ...], option: str) -> None:
    unknown = [n for n in names if n not in CHANGES]
    if unknown:
        raise UsageError(f"{option}: unknown change {', '.join(map(repr, unknown))}: choose from {', '.join(CHANGES)}")


def plan(baseline: WatchRecord, only: tuple[str, ...] = (), skip: tuple[str, ...] = (),
         script_batch: int | None = None) -> Plan:
    """The changes the baseline's facts make worth trying, and why each of the others is not.
    `script_batch`: the batch the script itself trains with, where `baseline` is a setting that
    changed it already (a larger batch is named by its factor over the script's)."""
    main = baseline.main
    out = Plan()
    if main is None or main.custom or not baseline.windows:
        out.skipped.append(Skip("all", "the baseline ran no timed Keras fit step"))
        return out
    for knob, found in (("jit_compile", _jit(baseline)), ("mixed_precision", _precision(baseline)),
                        ("steps_per_execution", _steps_per_execution(baseline)), ("workers", _workers(baseline)),
                        ("cache", _cache(baseline)),
                        ("prefetch", _prefetch(baseline)), ("device_batches", _device_batches(baseline)),
                        ("augment_in_model", augment_in_model(baseline)),
                        ("batch_size", _batch(baseline, script_batch)), ("data_parallel", _data_parallel(baseline))):
        if only and knob not in only:
            continue
        if knob in skip:
            out.skipped.append(Skip(knob, "--skip"))
        elif isinstance(found, str):
            out.skipped.append(Skip(knob, found))
        else:
            out.changes += found
    if (baseline.input_wait_share or 0) >= INPUT_HIGHLY:  # the input caps the step: its fixes first, the
        # one that removes the work (cache) before the ones that spread it, as a budget may end a round
        out.changes.sort(key=lambda c: INPUT_FIRST.index(c.knob) if c.knob in INPUT_FIRST else len(INPUT_FIRST))
    elif baseline.gpu_idle_share is not None and 1 - baseline.gpu_idle_share < STARVED_UTIL_PCT / 100:
        # a GPU idle most of the time waits on the host's calls, not the input: more work per call first
        out.changes.sort(key=lambda c: MORE_WORK_FIRST.index(c.knob) if c.knob in MORE_WORK_FIRST else
                         len(MORE_WORK_FIRST))
    if baseline.verdict and baseline.verdict[0].code == "devices_unused":  # the idle devices the largest saving:
        out.changes.sort(key=lambda c: c.knob != "data_parallel")  # spread first, before a --budget ends the round
    return out


INPUT_FIRST = ("cache", "device_batches", "augment_in_model", "workers", "prefetch")
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
        return ("Keras turns XLA off on a CPU-only TensorFlow, where it loses (0.10x of fit, docs/benchmarks.md); "
                "the script runs what Keras chose")
    if main.backend == "tensorflow" and main.strategy:
        return f"Keras does not XLA-compile under {main.strategy}"
    return [Change("jit_compile", "jit_compile", {"jit_compile": True}, "model.compile(..., jit_compile=True)",
                   f"the step runs without XLA on {main.backend} (jit_compile=False)")]


def _graph(r: WatchRecord) -> list[Change]:
    """A model left with run_eagerly=True: every step runs op by op in Python (Keras' debugging
    mode). The step compiled again, with XLA where Keras would use it (jax; TensorFlow on a GPU
    outside tf.distribute), else as TensorFlow's graph: the same pace-multiplying change as
    jit_compile, measured first (search.PACE_FIRST)."""
    main = r.main
    xla = main.backend == "jax" or (r.gpu is not None and not main.strategy)
    settings = {"run_eagerly": False, **({"jit_compile": True} if xla else {})}
    line = "model.compile(..., run_eagerly=False" + (", jit_compile=True)" if xla else ")") + \
        "   # and no `model.run_eagerly = True`"
    return [Change("jit_compile" if xla else "run_eagerly_false", "jit_compile", settings, line,
                   f"the step runs eagerly (run_eagerly=True): op by op in Python, on {main.backend}")]


def _precision(r: WatchRecord) -> list[Change] | str:
    main = r.main
    cc = float(r.gpu.compute_capability) if r.gpu and r.gpu.compute_capability else None
    if r.gpu is None:
        return "no GPU: mixed precision buys nothing on a CPU"
    if main.precision_policy not in (None, "float32"):
        return f"the script sets its own policy ({main.precision_policy})"
    if cc is None or cc < FP16_CC:
        return f"the GPU has no tensor cores for fp16/bf16 (compute capability {r.gpu.compute_capability or '?'})"
    wait = r.input_wait_share or 0
    most = 1 / (1 - (1 - wait) * (1 - 1 / PRECISION_MOST))
    if most < PRECISION_WORTH:
        return (f"the loop waits for input {wait:.0%} of the time: faster arithmetic could buy at most {most:.2f}x "
                "until the input is fixed (planned again on a setting that fixes it)")
    policy = "mixed_bfloat16" if cc >= BF16_CC else "mixed_float16"
    return [Change("mixed_precision", "mixed_precision", {"mixed_precision": policy},
                   f"keras.mixed_precision.set_global_policy('{policy}')   # before building the model",
                   f"float32 on a GPU with {'bf16' if cc >= BF16_CC else 'fp16'} tensor cores (compute capability "
                   f"{r.gpu.compute_capability})")]


def _steps_per_execution(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if (main.steps_per_execution or 1) > 1:
        return f"already steps_per_execution={main.steps_per_execution}"
    if main.jit_compile is False and main.backend == "jax":  # (tensorflow still runs a tf.function graph)
        return ("the step runs op by op (jit_compile=False): batching host calls comes after compiling it "
                "(measured on an H100: 38x from jit_compile, docs/benchmarks.md)")
    if (r.input_wait_share or 0) >= INPUT_BOUND_SHARE and not any(c.code == "input_handover" for c in r.verdict):
        return f"the loop waits for input ({r.input_wait_share:.0%} of the time): fewer host calls would not feed it"
    host = (r.outside_step_share or 0) >= OUTSIDE_STEP_SHARE or any(c.code in ("host_bound", "input_handover")
                                                                  for c in r.verdict)
    if (r.step_time_s or 1) >= SHORT_STEP_S and not host:
        return f"steps of {r.step_time_s * 1000:.0f} ms, and the loop is not host-bound: one call per step costs little"
    why = f"steps of {r.step_time_s * 1000:.1f} ms" + (" and a host-bound loop" if host else "")
    return [Change(f"steps_per_execution_{n}", "steps_per_execution", {"steps_per_execution": n},
                   f"model.compile(..., steps_per_execution={n})", why) for n in (8, 32)]


def _waits(r: WatchRecord) -> str | None:
    share = r.input_wait_share
    if share is None:
        return "the input wait was not seen (read inside a compiled loop)"
    if share < INPUT_BOUND_SHARE:
        return f"the loop waited for input {share:.1%} of the time (under {INPUT_BOUND_SHARE:.0%})"
    return None


def _waiting_pydataset(r: WatchRecord) -> str | None:
    """Why a change to a PyDataset does not apply, or None when the loop waits on one."""
    if r.main.input_type != "PyDataset":
        return f"the input is {r.main.input_type}, not a PyDataset"
    return _waits(r)


def _workers(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.input_type == "tf.data":
        return _parallel_calls(r)
    reason = _waiting_pydataset(r)
    if reason:
        return reason
    steady = r.steady
    fetch_s = sum(w.input_wait_s or 0 for w in steady) / max(1, sum(w.steps for w in steady))
    compute_s = max(r.step_time_s - fetch_s, 1e-6)
    have = main.input_workers or 1
    cores = r.env.cpu_count or 4
    # producers that keep up with the step, one more than the wait asks for, within the host's cores
    wanted = max(have + 1, min(cores, math.ceil(fetch_s * have / compute_s) + 1))
    why = f"{r.input_wait_share:.0%} of the time waiting for the next batch, {have} worker(s)"
    return [Change(f"workers_{wanted}_{kind}", "workers", {"workers": wanted, "processes": kind == "processes"},
                   f"super().__init__(workers={wanted}, use_multiprocessing={kind == 'processes'}, "
                   f"max_queue_size={2 * wanted})", why)
            for kind in ("threads", "processes")]


def _parallel_calls(r: WatchRecord) -> list[Change] | str:
    """A tf.data pipeline's maps and interleaves that the script left sequential, run with
    num_parallel_calls=tf.data.AUTOTUNE where it wrote them (child/tf_data.py): the guide's
    "parallelize the map transformation", its workers."""
    reason = _waits(r)
    if reason:
        return reason
    ops = r.main.pipeline
    if not ops:
        return "the calls that built the tf.data pipeline were not seen (built in a library, or a record before this)"
    serial = [op for op in ops if op.op in ("map", "interleave") and op.parallel is False]
    if not serial:
        return "every map and interleave of the pipeline runs in parallel already (num_parallel_calls)"
    where = ", ".join(f"{op.op} at line {op.line}" for op in serial)
    return [Change("parallel_calls", "workers", {"parallel_calls": True},
                   f"dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)   # {where}",
                   f"{r.input_wait_share:.0%} of the time waiting for the next batch; {where} run one element "
                   "at a time")]


def _cache(r: WatchRecord) -> list[Change] | str:
    reason = _waits(r)
    keep = repeats.keepable(r.main, r.env.host_memory_bytes)
    if isinstance(keep, str) or reason:
        return reason or keep
    settings = {"cache": True, **({"period": keep.period} if keep.period else {}),
                **({"cache_at": keep.at} if keep.at else {})}
    return [Change("cache", "cache", settings, repeats.cache_code(keep),
                   f"{keep.evidence}, and the loop waited {r.input_wait_share:.0%} of the time")]


def _prefetch(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.input_type not in ("tf.data", "generator"):
        return f"the input is {main.input_type}: prefetching applies to a tf.data dataset or a generator"
    reason = _waits(r)
    if reason:
        return reason
    helper = "tuned_pipeline" if main.input_type == "tf.data" else "read_ahead"
    line = repeats.definition(helper) + f"\n\nmodel.fit({helper}({'dataset' if helper == 'tuned_pipeline' else 'batches'}), ...)"
    return [Change("prefetch", "prefetch", {"prefetch": True}, line,
                   f"{r.input_wait_share:.0%} of the time waiting for the next batch ({main.input_type})")]


def _device_batches(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.backend != "jax" or main.input_type not in ("numpy", "jax array"):
        return f"for in-memory arrays on jax (here: {main.input_type} on {main.backend})"
    if r.gpu is None:
        return "no GPU: on a CPU the arrays already are where the step runs"
    b = main.batch_size or 32
    return [Change("device_batches", "device_batches", {"device_batches": True},
                   repeats.definition("device_slices") + f"\n\nmodel.fit(device_slices(x, y, batch_size={b}), "
                   f"steps_per_epoch=len(x) // {b}, ...)   # instead of model.fit(x, y, batch_size={b}, ...)",
                   f"fit(x, y) on jax gathers each batch of {main.batch_size} on the host and copies it to the GPU")]


def _fit_batches(main) -> bool:
    """fit cuts the batches itself (in-memory arrays and a batch_size): a change can set their size."""
    return main.input_type in ("numpy", "jax array") and bool(main.batch_size)


def _batch(r: WatchRecord, script_batch: int | None = None) -> list[Change] | str:
    """Larger batches, as far as memory and the data allow (batch_factors), each with the learning
    rate scaled for it (learning_rate): a setting that is a larger batch already gets the next
    ones (search.REPEATABLE). Named by their factor over the script's own batch."""
    main = r.main
    if not _fit_batches(main):
        return f"the input ({main.input_type}) comes in batches of its own: fit's batch_size does not change them"
    most = _most_batch_factor(r)
    if isinstance(most, str):
        return most
    base = script_batch or main.batch_size
    out = []
    for f in batch_factors(most):
        batch = main.batch_size * f
        rate = learning_rate(main, batch / base, _epoch_steps(main, batch))
        out.append(Change(f"batch_size_x{batch // base}", "batch_size", {"batch_size": batch, **rate.settings},
                          f"model.fit(..., batch_size={batch})" + rate.line,
                          f"batch {main.batch_size} of in-memory arrays (compared per sample: samples/s)"))
    return out


# A batch is enlarged in one round by these factors at most (the larger a factor, the fewer rounds
# reach the batch a compiled step needs: a small ViT left at batch 32 ran 3.2x faster at 1,024 than
# at 128, H100, docs/benchmarks.md); the next round refines from the winner (x2, x4 of it).
BATCH_FACTORS = (4, 16, 64)
# Steps an epoch keeps at the largest batch tried: fewer, and an epoch's end (its callbacks,
# validation, Keras' iterator made again) is a larger share of the time than at the script's batch
MIN_EPOCH_STEPS = 16


def batch_factors(most: int) -> list[int]:
    """The factors tried in one round, up to `most`: BATCH_FACTORS, and `most` itself where it
    falls between them (x2 where nothing larger fits)."""
    if most < 2:
        return []
    found = {f for f in BATCH_FACTORS if f <= most} | {min(most, BATCH_FACTORS[-1])}
    return sorted(found)


def _most_batch_factor(r: WatchRecord) -> int | str:
    """The largest power-of-two factor of the run's batch that fits the GPU's memory (memory grows
    at most in proportion to the batch: the weights' share does not) and keeps MIN_EPOCH_STEPS
    steps an epoch; a reason where not even x2 does."""
    main = r.main
    most = 2 ** 20
    if r.gpu is not None:
        peak, total = main.peak_memory_bytes, r.gpu.memory_total_bytes
        if not peak or not total:
            return "the run's peak memory is not known: no batch is promised to fit"
        most = int(BATCH_MEMORY_SHARE * total // peak)
        if most < 2:
            return f"twice the batch would not fit ({peak * 2 / 2**30:.1f} GiB of {total / 2**30:.0f} GiB)"
    samples = _epoch_samples(main)
    if samples:
        most = min(most, samples // (MIN_EPOCH_STEPS * main.batch_size))
        if most < 2:
            return (f"an epoch holds {samples:,} samples: a batch of {2 * main.batch_size} would leave fewer than "
                    f"{MIN_EPOCH_STEPS} steps an epoch")
    return 2 ** int(math.log2(most))


def _epoch_samples(main) -> int | None:
    return main.steps_per_epoch * main.batch_size if main.steps_per_epoch and main.batch_size else None


def _epoch_steps(main, batch: int) -> int | None:
    samples = _epoch_samples(main)
    return max(1, samples // batch) if samples else None


@dataclass(frozen=True)
class Rate:
    settings: dict  # learning_rate_factor and warmup_steps, for child/tune_overrides.py
    line: str  # what the changed line says of it


# Optimizers whose update is the gradient times the rate: the linear scaling rule (Goyal et al.
# 2017). Adaptive ones (Adam, AdamW, RMSprop, Lion, ...) scale by the square root (Malladi et al.
# 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"): a linear x32 on AdamW's
# 1e-3 is a rate no transformer trains at.
LINEAR_RATE_OPTIMIZERS = ("SGD",)


def learning_rate(main, factor: float, warmup_steps: int | None) -> Rate:
    """The learning rate for a batch `factor` times the script's: scaled by the rule for its
    optimizer, reached by a linear warm-up over one epoch of the new batch (Goyal et al. 2017,
    section 2.2, warm up from the rate as it was), as the measured runs train it and the patch
    writes it (child/fixes.py scaled_learning_rate)."""
    if factor <= 1:
        return Rate({}, "")
    optimizer = main.optimizer
    if not optimizer:
        return Rate({}, "   # the optimizer was not seen: scale its learning rate for the batch yourself")
    inner = optimizer.split("(")[-1].rstrip(")")
    linear = inner in LINEAR_RATE_OPTIMIZERS
    scale = factor if linear else math.sqrt(factor)
    # beside a callback that sets the rate as a number, no schedule: it would stop the callback
    warmup = 0 if main.rate_callback else (warmup_steps or 1)
    rule = "x the batch's factor: the linear scaling rule, Goyal et al. 2017" if linear else \
        f"x the square root of the batch's factor for {inner}: Malladi et al. 2022"
    how = f"warmed up over {warmup} steps" if warmup else f"no warm-up beside the script's {main.rate_callback}"
    return Rate({"learning_rate_factor": round(scale, 4), "warmup_steps": warmup},
                f"   # and the learning rate x{scale:.3g} ({rule}), {how} (scaled_learning_rate)")


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
    out = [Change("data_parallel", "data_parallel", {"data_parallel": True},
                  code + f"\n# the global batch as it is: each device computes 1/{devices} of it", why)]
    if _fit_batches(main):
        bigger = main.batch_size * devices
        rate = learning_rate(main, devices, _epoch_steps(main, bigger))
        out.append(Change("data_parallel_batch", "data_parallel", {"data_parallel": True, "batch_size": bigger,
                                                                    **rate.settings},
                          f"{code}\nmodel.fit(..., batch_size={bigger})   # {devices} x {main.batch_size}: "
                          f"each device the batch one had" + rate.line.replace("   # and", ";", 1),
                          f"{why}; the global batch {devices} times larger, the learning rate scaled for it"))
    return out


def rates(r: WatchRecord, batch_size: int | None) -> list[float]:
    """The steady windows' samples/s; where the instrumentation could not count samples (the input
    read inside a compiled loop of steps_per_execution steps), from the steps and the batch the
    baseline fed, which the change did not touch."""
    counted = r.window_samples_per_s()
    if counted or not batch_size:
        return counted
    return [w.steps * batch_size / w.seconds for w in r.steady if w.seconds > 0]


def health(r: WatchRecord, baseline: WatchRecord) -> str | None:
    """Why a change's training is not healthy, or None: its loss clearly worse than the baseline's
    where the two compare (loss_point), or not finite. Losses after different counts of steps at
    the same batch say nothing of each other (the final block runs the baseline at its count and
    the best at its round's): then only a loss that is not finite is said."""
    loss, base = (r.main.last_loss if r.main else None), (baseline.main.last_loss if baseline.main else None)
    if loss is None or (not math.isfinite(loss) and base is not None and not math.isfinite(base)):
        return None  # the baseline diverges too: the session leads with that, not the change's doing
    if base is not None and math.isfinite(base) and r.main.steps != baseline.main.steps:
        base = None
    if not math.isfinite(loss):
        return f"the loss is {loss} after {r.main.steps} steps (the baseline's: {base:.4g})" if base is not None \
            else f"the loss is {loss}"
    point = loss_point(r, baseline)
    if point is None:
        return None
    value, base, where = point
    if value > base * LOSS_WORSE_RATIO and value - base > LOSS_WORSE_ABSOLUTE:
        return f"the loss is {value:.4g} {where} against the baseline's {base:.4g}"
    return None


def loss_point(r: WatchRecord, baseline: WatchRecord) -> tuple[float, float, str] | None:
    """(the run's loss, the baseline's, where they were read) where the two compare: at equal
    steps of the same batch; for a larger batch, at the end of the run's first window that had
    seen as many samples as the baseline's whole run (issue 60: after equal steps a batch twice as
    large has seen twice the samples, and a loss read there is not the same training). Keras'
    loss is its mean over the epoch so far: at equal samples the two means cover the same share
    of an epoch. None where they do not compare."""
    main, other = r.main, baseline.main
    if main is None or other is None or other.last_loss is None or not math.isfinite(other.last_loss):
        return None
    if (main.batch_size or 0) <= (other.batch_size or 0) or not other.samples:
        if main.steps != other.steps or main.last_loss is None:
            return None
        return main.last_loss, other.last_loss, f"after {main.steps} steps"
    point, seen = None, main.samples
    for window in reversed(main.windows):  # the samples seen at each window's end, latest first
        if seen < other.samples:
            break
        if window.loss is not None and math.isfinite(window.loss):
            point = (window.loss, seen)
        seen -= window.samples or 0
    if point is None:
        return None
    return point[0], other.last_loss, f"after {point[1]:,} samples (the baseline's run: {other.samples:,})"


def row(change: Change | None, r: WatchRecord, baseline: WatchRecord) -> dict:
    """One line of the table: a run's figures against one baseline run."""
    return judged(change, [r], [baseline], baseline.batch_size)


def judged(change: Change | None, runs: list[WatchRecord], beside: list[WatchRecord], batch: int | None) -> dict:
    """A setting's runs against the reference runs beside them: their steady windows pooled on
    each side (the figures shown are of the setting's latest run)."""
    r = runs[-1]
    out = {"change": change.name if change else "baseline", "knob": change.knob if change else None,
           "line": change.line if change else None, "why": change.why if change else None, "run_id": r.id,
           "status": r.status, "applied": r.applied, "samples_per_s": r.samples_per_s,
           "ci95_low": r.throughput.ci95_low if r.throughput else None,
           "ci95_high": r.throughput.ci95_high if r.throughput else None, "step_time_s": r.step_time_s,
           "input_wait_share": r.input_wait_share, "gpu_busy_share": None if r.gpu_idle_share is None
           else 1 - r.gpu_idle_share, "peak_memory_bytes": r.main.peak_memory_bytes if r.main else None,
           "last_loss": r.main.last_loss if r.main else None, "steps": r.main.steps if r.main else 0}
    own_batch = batch if change is None or "batch_size" not in change.settings else None
    windows = [w for run in runs for w in rates(run, own_batch)]
    if windows and not r.samples_per_s:  # counted from steps: say so, and show the figure
        out.update(samples_per_s=statistics.median(windows),
                   note=f"samples counted as steps x the baseline's batch ({batch})")
    missing = [k for k in ({change.knob} if change and change.knob != "combined" else
                           {k for k in (change.settings if change else {}) if k in CHANGES}) if k not in r.applied]
    if change is not None and missing:
        out.update(note=f"nothing in this script to apply {', '.join(sorted(missing))} to")
    elif change is not None and "mixed_precision" in change.settings and r.main and \
            r.main.precision_policy in (None, "float32"):  # what fit ran, whatever was set
        out.update(note="the policy was set, but the model trained in float32 (a layer or the script set its own)")
    failed = next((run for run in runs if not run.ok), None)
    if failed is not None or not windows:
        failed = failed or r
        why = failed.error.explanations[0] if failed.error and failed.error.explanations else None
        out.update(verdict="failed", healthy=False,
                   failure=(f"{why.title}: {why.fix}" if why else
                            (failed.verdict[0].evidence if failed.verdict else f"status {failed.status}")))
        return out
    base = [w for run in beside for w in rates(run, batch)]
    if change is not None and base:
        c = contrast(windows, base)
        out.update(ratio=c.ratio, ratio_low=c.ratio_low, ratio_high=c.ratio_high, p_value=c.p_value, test=c.test,
                   verdict=c.verdict)
        if r.main and r.main.replicas > 1 and beside[0].main and r.main.replicas > beside[0].main.replicas:
            # data parallelism: the speed-up per device added, against the reference's devices
            out.update(devices=r.main.replicas, efficiency=c.ratio * beside[0].main.replicas / r.main.replicas)
    problems = [p for run in runs if (p := health(run, beside[0] if beside else run))]
    out.update(healthy=not problems, health=problems[0] if problems else None)
    return out


def noisy(first: WatchRecord, again: WatchRecord) -> str | None:
    """The baseline's two runs: when their medians differ beyond NOISY_SHARE and their intervals do
    not overlap, the session's differences under that are noise, and the table says so."""
    a, b = first.throughput, again.throughput
    if not a or not b or not a.median or not b.median:
        return None
    apart = abs(b.median / a.median - 1)
    overlap = a.ci95_low is None or b.ci95_low is None or (a.ci95_low <= b.ci95_high and b.ci95_low <= a.ci95_high)
    if apart > NOISY_SHARE and not overlap:
        return (f"the baseline ran at {a.median:,.0f} and then {b.median:,.0f} samples/s ({apart:.0%} apart): the "
                f"machine was noisy, and differences under that mean nothing")
    return None
