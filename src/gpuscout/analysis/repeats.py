"""Can a script's batches be kept after they are first made? One rule for watch's verdict and
tune's `cache` change (so the two never disagree on what to try), from what the instrumentation
saw (record.watch.InputRepeats)."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from gpuscout.record.watch import InputRepeats, WatchedFit

# What a cache may take of the host's memory: the rest is the script's, the framework's and the
# input's own (worker processes, prefetch queues).
CACHE_MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class Keepable:
    """The batches repeat and fit in memory: what a cache keeps and the code that keeps it."""

    evidence: str
    bytes: int | None
    period: int | None  # a generator's; None for a PyDataset (kept by index)
    code: str
    at: str | None = None  # tf.data: the file:line of the map a cache() goes after


def gib(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{max(1, round(n / 2**10))} KiB"  # never "0 MiB"


def keepable(main: WatchedFit, host_memory_bytes: int | None) -> Keepable | str:
    """The batches to keep, or why they cannot be."""
    seen: InputRepeats | None = main.input_repeats
    if main.input_type == "tf.data":
        return _keepable_map(main, host_memory_bytes)
    if main.input_type not in ("PyDataset", "generator"):
        return f"the input is {main.input_type}: not a PyDataset, a generator or a tf.data pipeline"
    if seen is None:
        return "whether the batches repeat was not checked (a run before gpuscout checked it)"
    if seen.stopped:
        return f"whether the batches repeat could not be checked: {seen.stopped}"
    if not seen.checked:
        return (
            "no batch came again in the run (it ended within the first epoch)"
            if seen.order == "epoch"
            else "the generator's first batch never came again in the run: it repeats with no period seen, or not"
        )
    if seen.same < seen.checked:
        unit = (
            "read after the first epoch were new ones"
            if seen.order == "epoch"
            else "differed from the batch one period before"
        )
        return (
            f"{seen.checked - seen.same} of {seen.checked} batches {unit} (random augmentation or "
            "shuffling): keeping them would change what the model sees"
        )
    size = seen.bytes or 0
    if host_memory_bytes and size > CACHE_MEMORY_SHARE * host_memory_bytes:
        return (
            f"the batches repeat, but keeping them takes {gib(size)}, more than half of the host's "
            f"{gib(host_memory_bytes)}"
        )
    if seen.order == "epoch":
        what = (
            f"the {seen.checked} batches read after the first epoch were all among the {seen.batches} the "
            "dataset made before (the same batch for an index every epoch)"
        )
        code = "model.fit(CachedBatches(dataset), ...)"
    else:
        what = (
            f"the generator's batches repeat every {seen.period} batches ({seen.checked} checked against the "
            "period before)"
        )
        code = f"model.fit(replayed(batches, period={seen.period}), ...)"
    return Keepable(
        evidence=f"{what}: keeping them takes {gib(size)} of host memory",
        bytes=size,
        period=seen.period if seen.order == "stream" else None,
        code=code,
    )


def _keepable_map(main: WatchedFit, host_memory_bytes: int | None) -> Keepable | str:
    """A tf.data pipeline's last map (of the script's own calls) whose elements were made twice
    the same (child/tf_data.py), with no shuffle before it (its order would be frozen) and no
    cache after it, whose whole output fits: a `.cache()` right after it makes them once (the
    tf.data guide's "cache after the expensive, deterministic steps")."""
    ops = main.pipeline
    if not ops:
        return "the calls that built the tf.data pipeline were not seen (built in a library, or a record before this)"
    maps = [i for i, op in enumerate(ops) if op.op == "map"]
    if not maps:
        return "the tf.data pipeline has no map of the script's own to cache after"
    why = None
    for i in reversed(maps):
        op = ops[i]
        where = f"{Path(op.file).name}:{op.line}"
        if any(o.op == "cache" for o in ops[i + 1 :]):
            return f"the pipeline caches after the map at {where} already"
        if any(o.op == "shuffle" for o in ops[:i]):
            why = why or f"the map at {where} comes after a shuffle: a cache would freeze the first epoch's order"
            continue
        if op.repeats is None:
            why = why or f"whether the map at {where} makes the same elements again was not checked" + (
                f" ({op.repeats_note})" if op.repeats_note else ""
            )
            continue
        if not op.repeats:
            why = why or (
                f"the map at {where} made different elements in two passes (random augmentation, or "
                "a shuffle before it): keeping them would change what the model sees"
            )
            continue
        if op.elements is None:
            why = why or (
                f"the map at {where} makes {'endless' if op.endless else 'an unknown number of'} "
                "elements: a cache after it would not end"
            )
            continue
        size = op.elements * (op.element_bytes or 0)
        if host_memory_bytes and size > CACHE_MEMORY_SHARE * host_memory_bytes:
            why = why or (
                f"the map at {where} repeats, but keeping its {op.elements:,} elements takes {gib(size)}, "
                f"more than half of the host's {gib(host_memory_bytes)}"
            )
            continue
        return Keepable(
            evidence=f"the map at {where} made its first elements the same in two passes, "
            f"{op.elements:,} elements of {gib(op.element_bytes or 0)}: keeping them takes "
            f"{gib(size)} of host memory",
            bytes=size,
            period=None,
            at=f"{op.file}:{op.line}",
            code=f"dataset = dataset.map(...).cache()   # {where}: after the map, before what is random",
        )
    return why


# The files whose definitions a patch copies (each stands alone: Keras and the standard library)
FIXES = tuple(Path(__file__).resolve().parent.parent / "child" / name for name in ("fixes.py", "spawned_workers.py"))


@functools.cache
def definition(name: str) -> str:
    """The source of a definition in child/fixes.py or spawned_workers.py (the code tune injects),
    read without importing it (it imports Keras): what a user is told to write is what was measured."""
    for path in FIXES:
        text = path.read_text()
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                lines = text.splitlines()[
                    min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 : node.end_lineno
                ]
                return "\n".join(lines)  # with its decorators, which ast's own segment leaves out
    raise KeyError(name)


def cache_code(keep: Keepable) -> str:
    """The lines to write: the definition, then fit given the kept input."""
    if keep.at:  # tf.data's own cache
        return keep.code
    return definition("replayed" if keep.period else "CachedBatches") + "\n\n" + keep.code
