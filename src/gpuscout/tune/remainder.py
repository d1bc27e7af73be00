"""What the best setting of a `tune -- COMMAND` session still waits on, the most a fix there could
buy, and what would buy it: said whatever the session kept (issue 60: 'left' was empty beside a
GPU 17% busy)."""

from __future__ import annotations

from gpuscout.analysis import repeats
from gpuscout.analysis.device_causes import FP16_CC, precision_of
from gpuscout.analysis.untimed import STARVED_UTIL_PCT
from gpuscout.analysis.verdict import INPUT_HIGHLY
from gpuscout.core.spec import Precision
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.changes import KINDS, ChangeKind
from gpuscout.tune.changes import augment_in_model as augment

# A remainder worth saying: the best setting still waits on input or the host this share of the time
LEFT_SHARE = INPUT_HIGHLY  # 20%


def left(
    best: WatchRecord | None,
    probe: WatchRecord,
    kept: set[str],
    slower: tuple[str, ...] = (),
    skipped: dict[str, str] | None = None,
) -> str:
    """What the best setting still waits on, the most a fix there could buy, and what would buy it:
    the input or the host where they hold it LEFT_SHARE of the time, else a GPU busy less than a
    starved one's share, else float32 on tensor cores that mixed precision was not kept for, else
    the step's compute, with its shares: always said (issue 60: 'left' was empty beside a GPU 17%
    busy). `slower`: the changes measured no faster, whose advice is not given again (processes for
    a GIL-bound PyDataset ran 0.42x on a 16-core H100 host); `skipped`: by knob, why a change was
    not tried or not kept (it changes the training): advice for one says so, never just the change
    (issue 74: "left: ... fewer host calls (steps_per_execution)" beside "not tried:
    steps_per_execution: ...")."""
    r = best or probe
    wait, outside = r.input_wait_share or 0, r.outside_step_share or 0
    if max(wait, outside) < LEFT_SHARE:
        return _device_left(r, kept)
    share, what = (wait, "input") if wait >= outside else (outside, "the loop's host work between steps")
    most = 1 / (1 - share)
    main = r.main
    if what == "input":
        keep = repeats.keepable(probe.main, probe.env.host_memory_bytes) if probe.main else "not checked"
        after = _input_left(kept)
        if after is None and isinstance(keep, repeats.Keepable):
            how = f"the batches repeat ({keep.evidence}): make them once and keep them"
        elif after is not None:
            how = after
        elif main is not None and main.input_type == "PyDataset" and not main.input_multiprocessing:
            measured = next((name for name in slower if name.startswith(f"{_processes().name}_")), None)
            how = (
                "the PyDataset's work runs in threads under the GIL, and worker processes measured no faster "
                f"({measured}: each batch is handed over at a cost of its own): the per-sample work "
                "moved into the model (Keras preprocessing layers, on the device) or written as array operations"
                if measured
                else "the PyDataset's work runs in threads under the GIL: worker processes, "
                "or the work moved into the model"
            )
            work = probe.main.sample_work if probe.main else None
            if work is not None:  # the exact lines (issue 60): what to move, by hand where tune could not
                how += f"; in __getitem__, {augment.hot_lines(work)}"
        elif main is not None and main.input_type == "generator":
            how = "one Python thread makes every batch: a PyDataset with worker processes, or tf.data"
        else:
            how = "a faster pipeline: its per-batch work in parallel (tf.data map with AUTOTUNE), or done once"
    else:
        how = _host_left(kept, slower, skipped or {})
    return (
        f"the best setting still waits on {what} {share:.0%} of the time: a fix there could buy at most "
        f"{most:.2f}x more; {how}"
    )


def _input_left(kept: set[str]) -> str | None:
    """What the input still waits on after the kept changes, in the words of the kept kind that
    removed the most (the lowest input_rank with words of its own: ChangeKind.input_left)."""
    saying = [KINDS[k] for k in kept if k in KINDS and KINDS[k].input_left]
    first = min(saying, key=lambda k: k.input_rank or 0, default=None)
    return first.input_left if first is not None else None


def _processes() -> ChangeKind:
    """The kind that makes a PyDataset's batches outside the GIL: the advice for a GIL-bound one."""
    return next(k for k in KINDS.values() if k.outside_gil)


def _host_left(kept: set[str], slower: tuple[str, ...], skipped: dict[str, str]) -> str:
    """What the loop's host work between steps is left to, given what the change that takes the
    host's calls away (ChangeKind.fewer_calls: steps_per_execution) did."""
    calls, name = "less work in callbacks and between steps", _fewer_calls().name
    if name in kept:
        return f"{name} is kept; what is left is {calls} (Keras' own, a callback's)"
    measured = next((n for n in slower if n.startswith(name)), None)
    if measured:
        return f"fewer host calls measured no faster ({measured}): {calls}"
    if name in skipped:
        return f"{calls}; fewer host calls ({name}) were {skipped[name]}"
    return f"fewer host calls ({name}) or {calls}"


def _fewer_calls() -> ChangeKind:
    return next(k for k in KINDS.values() if k.fewer_calls)


def _device_left(r: WatchRecord, kept: set[str]) -> str:
    """What holds a setting back on the device, where the host does not: a GPU that idles, a step
    in float32 on tensor cores, else the step's own compute, with the shares measured."""
    main = r.main
    if r.gpu_idle_share is not None and 1 - r.gpu_idle_share < STARVED_UTIL_PCT / 100:
        busy = 1 - r.gpu_idle_share
        batch = f" at batch {r.batch_size}" if r.batch_size else ""
        return (
            f"the GPU is busy {busy:.0%} of the time{batch}: more work per step (a larger batch, "
            "steps_per_execution) or a faster host loop would give it more; at most "
            f"{1 / max(busy, 0.01):.1f}x where the step scales with it"
        )
    if (
        main is not None
        and r.gpu is not None
        and precision_of(main.precision_policy) is Precision.fp32
        and not any(KINDS[k].tensor_cores for k in kept if k in KINDS)
        and r.gpu.compute_capability
        and float(r.gpu.compute_capability) >= FP16_CC
    ):
        return (
            f"the step runs in float32 on a GPU with tensor cores (compute capability {r.gpu.compute_capability}"
            "): mixed precision was not kept, or not measured within the budget"
        )
    shares = f"input wait {r.input_wait_share or 0:.0%}, host work between steps {r.outside_step_share or 0:.0%}"
    if r.gpu_idle_share is not None:
        return (
            f"the step's own compute: the GPU is busy {1 - r.gpu_idle_share:.0%} of the time ({shares}); "
            "a faster GPU or fewer FLOPs per sample is what is left"
        )
    return f"the step's own compute ({shares}): a GPU, or fewer FLOPs per sample, is what is left"
