"""The changes tune makes to the input a script feeds fit, each planned from the baseline's facts
(tune/script.py's plan calls them): a PyDataset's workers and a tf.data map's parallel calls, a
cache of batches that repeat, read-ahead, and in-memory arrays moved to the device. Each returns
its changes, or why it does not apply."""

from __future__ import annotations

import math

from gpuscout.analysis import repeats
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change, not_waiting


def _waiting_pydataset(r: WatchRecord) -> str | None:
    """Why a change to a PyDataset does not apply, or None when the loop waits on one."""
    if r.main.input_type != "PyDataset":
        return f"the input is {r.main.input_type}, not a PyDataset"
    return not_waiting(r)


def workers(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.input_type == "tf.data":
        return parallel_calls(r)
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
    return [
        Change(
            f"workers_{wanted}_{kind}",
            "workers",
            {"workers": wanted, "processes": kind == "processes"},
            f"super().__init__(workers={wanted}, use_multiprocessing={kind == 'processes'}, "
            f"max_queue_size={2 * wanted})",
            why,
        )
        for kind in ("threads", "processes")
    ]


def parallel_calls(r: WatchRecord) -> list[Change] | str:
    """A tf.data pipeline's maps and interleaves that the script left sequential, run with
    num_parallel_calls=tf.data.AUTOTUNE where it wrote them (child/tf_data.py): the guide's
    "parallelize the map transformation", its workers."""
    reason = not_waiting(r)
    if reason:
        return reason
    ops = r.main.pipeline
    if not ops:
        return "the calls that built the tf.data pipeline were not seen (built in a library, or a record before this)"
    serial = [op for op in ops if op.op in ("map", "interleave") and op.parallel is False]
    if not serial:
        return "every map and interleave of the pipeline runs in parallel already (num_parallel_calls)"
    where = ", ".join(f"{op.op} at line {op.line}" for op in serial)
    return [
        Change(
            "parallel_calls",
            "workers",
            {"parallel_calls": True},
            f"dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)   # {where}",
            f"{r.input_wait_share:.0%} of the time waiting for the next batch; {where} run one element at a time",
        )
    ]


def cache(r: WatchRecord) -> list[Change] | str:
    reason = not_waiting(r)
    keep = repeats.keepable(r.main, r.env.host_memory_bytes)
    if isinstance(keep, str) or reason:
        return reason or keep
    # the steps it fills in, judged after them (judging.fill_steps): a generator's period, else an epoch
    seen = r.main.input_repeats
    fill = (
        keep.period
        or (seen.batches if seen and seen.order == "epoch" else None)
        or r.main.steps_per_epoch
        or next((e.steps for e in r.main.epochs), None)
    )
    settings = {
        "cache": True,
        **({"period": keep.period} if keep.period else {}),
        **({"cache_at": keep.at} if keep.at else {}),
        **({"fill_steps": fill} if fill else {}),
    }
    return [
        Change(
            "cache",
            "cache",
            settings,
            repeats.cache_code(keep),
            f"{keep.evidence}, and the loop waited {r.input_wait_share:.0%} of the time",
        )
    ]


def prefetch(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.input_type not in ("tf.data", "generator"):
        return f"the input is {main.input_type}: prefetching applies to a tf.data dataset or a generator"
    reason = not_waiting(r)
    if reason:
        return reason
    helper = "tuned_pipeline" if main.input_type == "tf.data" else "read_ahead"
    line = (
        repeats.definition(helper)
        + f"\n\nmodel.fit({helper}({'dataset' if helper == 'tuned_pipeline' else 'batches'}), ...)"
    )
    return [
        Change(
            "prefetch",
            "prefetch",
            {"prefetch": True},
            line,
            f"{r.input_wait_share:.0%} of the time waiting for the next batch ({main.input_type})",
        )
    ]


# What the arrays and their reshuffled copy (fixes.device_slices) may take of the GPU's memory: the
# rest is the model's, its optimizer's and the step's activations.
DEVICE_SHARE = 0.25


def device_batches(r: WatchRecord) -> list[Change] | str:
    main = r.main
    if main.backend != "jax" or main.input_type not in ("numpy", "jax array"):
        return f"for in-memory arrays on jax (here: {main.input_type} on {main.backend})"
    if r.gpu is None:
        return "no GPU: on a CPU the arrays already are where the step runs"
    if main.weighted:
        return "fit weighs its samples (sample_weight or class_weight), which device slices do not carry"
    b = main.batch_size or 32
    held = 2 * (main.batch_bytes or 0) * (next((e.steps for e in main.epochs), None) or main.steps_per_epoch or 0)
    memory = r.gpu.memory_total_bytes
    if memory and held > DEVICE_SHARE * memory:
        return (
            f"the arrays and the epoch's reshuffled copy of them take {repeats.gib(held)}, more than "
            f"{DEVICE_SHARE:.0%} of the GPU's {repeats.gib(memory)}"
        )
    shuffle = "" if main.shuffle is None else f", shuffle={main.shuffle!r}"
    return [
        Change(
            "device_batches",
            "device_batches",
            {"device_batches": True},
            repeats.definition("device_slices") + f"\n\nmodel.fit(device_slices(x, y, {b}{shuffle}), "
            f"steps_per_epoch=math.ceil(len(x) / {b}), ...)   # instead of model.fit(x, y, batch_size={b}, ...)",
            f"fit(x, y) on jax gathers each batch of {main.batch_size} on the host and copies it to the GPU; "
            "the slices are fit's batches, reshuffled each epoch as fit does",
        )
    ]
