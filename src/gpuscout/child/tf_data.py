"""A script's tf.data pipeline as the script built it, and tune's changes made where it built it.

When TensorFlow's dataset module loads, the methods a pipeline is built with (`map`,
`interleave`, `batch`, `shuffle`, `cache`, `prefetch`, ...) are wrapped: each call made from the
script's own code (not TensorFlow's or Keras') is remembered with its file and line, and every
dataset knows the chain of such calls that made it. `fit` then reports the chain of the dataset it
was given (`chain_of`), and the first baseline of a tune session checks, for each `map`, whether
the elements it makes repeat (`check_repeats`: the prefix up to it iterated twice), which is
what a `cache()` after it needs (a random augmentation, or a shuffle before it, would be frozen).

Under `gpuscout tune -- COMMAND` the same wrappers apply the tf.data changes where the script
wrote the calls (the TensorFlow guide's, "Better performance with the tf.data API"):
`parallel_calls` (a map or interleave left sequential runs with
num_parallel_calls=tf.data.AUTOTUNE), `cache_at` (a `.cache()` right after the map at that
file:line) and `augment_map` (the map at its file:line left out: its augmentation runs as layers
in the model, child/map_augment.py). What the patch writes is the same: tune/changes/.

Only the standard library, TensorFlow and numpy are imported here, TensorFlow only once loaded.
"""

from __future__ import annotations

import os
import sys
import weakref

from gpuscout.child import tune_state
from gpuscout.child.tune_state import applied
from gpuscout.child.watch_state import report_failure

TARGET = "tensorflow.python.data.ops.dataset_ops"
# The calls remembered: what shapes a pipeline's cost (the rest pass their chain on unchanged)
BUILDERS = (
    "map",
    "interleave",
    "batch",
    "padded_batch",
    "unbatch",
    "shuffle",
    "cache",
    "prefetch",
    "repeat",
    "filter",
    "take",
    "skip",
    "with_options",
    "apply",
    "rebatch",
)
# Where a builder takes num_parallel_calls among its positional arguments
PARALLEL_AT = {"map": 1, "interleave": 3, "batch": 2}
# Elements of a map's output compared between two passes: what tells a deterministic step from a
# random one (two passes of a random augmentation differ in their first element)
REPEAT_CHECKED = 4
# ... but at least this many where an element is one image (a map before batch()): a random flip
# is one coin an image, and four images came out the same in both passes one time in 16 (a unit
# test's flake, 2026-12-07): the map was taken for deterministic, its augmentation for cacheable.
# 32 coins: one time in four billion.
IMAGES_CHECKED = 32
# Packages whose calls are not the script's own: TensorFlow's and Keras' data adapters build maps
# of their own, and gpuscout's fixes wrap the dataset fit is given. Told by where each package is
# installed, not by a folder's name (a user's project may well live in a folder called keras)
NOT_THE_SCRIPTS = ("tensorflow", "keras", "tf_keras", "gpuscout")

_chains: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # dataset -> [op, ...]
# What an op keeps that the record does not: the dataset it made, a map's function and its input
KEPT = ("dataset", "function", "before")
# The maps left out where the script wrote them (augment_map), by FILE:LINE
SKIPPED: set[str] = set()


def _packages() -> tuple[str, ...]:
    """The folders NOT_THE_SCRIPTS are installed in (those imported so far)."""
    found = []
    for name in NOT_THE_SCRIPTS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if where:
            found.append(os.path.dirname(os.path.abspath(where)) + os.sep)
    return tuple(found)


def _site() -> tuple[str, int] | None:
    """The script's own frame that called the builder, or None where TensorFlow, Keras or
    gpuscout did (two frames up: past the wrapper)."""
    frame = sys._getframe(2)
    name = frame.f_code.co_filename
    if name.startswith("<frozen") or os.path.abspath(name).startswith(_packages()):
        return None
    return name, frame.f_lineno


def install(module) -> None:
    """TensorFlow's dataset module has just been executed: its builders wrapped."""
    dataset = module.DatasetV2
    for name in BUILDERS:
        method = dataset.__dict__.get(name)
        if method is not None and not getattr(method, "_gpuscout_wrapped", False):
            setattr(dataset, name, _wrapped(name, method))


def _wrapped(name: str, method):
    def builder(self, *args, **kwargs):
        site = _site()
        given = kwargs.get(
            "num_parallel_calls", args[PARALLEL_AT[name]] if len(args) > PARALLEL_AT.get(name, 99) else None
        )
        if site is not None and name in ("map", "interleave") and tune_state.SETTINGS.parallel_calls and given is None:
            import tensorflow as tf

            kwargs["num_parallel_calls"] = given = tf.data.AUTOTUNE
            applied(
                "workers",
                f"dataset.{name}(..., num_parallel_calls=tf.data.AUTOTUNE) where the script left it sequential",
            )
        at = f"{site[0]}:{site[1]}" if site is not None else None
        moved = tune_state.SETTINGS.augment_map
        if name == "map" and moved and at is not None and moved.get("at") == at:
            SKIPPED.add(at)  # its augmentation runs in the model (applies/augment_map.py): the map left out
            return self
        out = method(self, *args, **kwargs)
        made = out
        if site is not None and name == "map" and tune_state.SETTINGS.cache_at == f"{site[0]}:{site[1]}":
            out = out.cache()
            applied("cache", f"dataset.map(...).cache() at {os.path.basename(site[0])}:{site[1]}")
        try:
            chain = list(_chains.get(self, ()))
            if site is not None:
                op = {
                    "op": name,
                    "file": site[0],
                    "line": site[1],
                    "parallel": given is not None if name in ("map", "interleave", "batch") else None,
                    "dataset": weakref.ref(made),
                }
                if name == "map":  # what telling its augmentation calls again (map_augment.tell)
                    op.update(function=kwargs.get("map_func", args[0] if args else None), before=weakref.ref(self))
                chain.append(op)
                if out is not made:
                    chain.append(
                        {"op": "cache", "file": site[0], "line": site[1], "parallel": None, "dataset": weakref.ref(out)}
                    )
            _chains[out] = chain
        except Exception as exc:  # the chain unknown (a dataset that cannot be weakly referenced): the
            # script's pipeline is built as it was all the same
            if not isinstance(exc, TypeError):
                report_failure("reading a tf.data call", exc)
        return out

    builder._gpuscout_wrapped = True
    builder.__wrapped__ = method
    builder.__doc__ = method.__doc__
    return builder


def chain_of(dataset, check_repeats: bool = False, tell_augmentation: bool = False) -> list[dict] | None:
    """The script's calls that built `dataset`, in order, as the record keeps them (PipelineOp);
    with `check_repeats`, each map's elements checked to repeat and its output's size; with
    `tell_augmentation` too, each map whose elements do not repeat (a random one) told as layers
    (map_augment.tell). None where the dataset was not built through the wrapped methods."""
    try:
        chain = _chains.get(dataset)
    except TypeError:
        return None
    if not chain:
        return None
    out = []
    for op in chain:
        facts = {k: v for k, v in op.items() if k not in KEPT}
        made = op["dataset"]()
        if check_repeats and op["op"] == "map" and made is not None:
            facts.update(_repeats(made))
            before = op["before"]()
            if tell_augmentation and facts.get("repeats") is False and before is not None and op["function"]:
                from gpuscout.child import map_augment

                try:
                    facts["augment"] = map_augment.tell(op["function"], before)
                except Exception as exc:  # the script's function, called as tf.data would not: said, not raised
                    facts["augment"] = {"why_not": f"calling it again failed: {type(exc).__name__}: {str(exc)[:200]}"}
        out.append(facts)
    return out


def map_sites(dataset) -> list[str]:
    """The FILE:LINE of each of the script's maps that built `dataset` (fit's validation data):
    whether a map left out of the training pipeline is left out of it too."""
    try:
        chain = _chains.get(dataset) or []
    except TypeError:
        return []
    return [f"{op['file']}:{op['line']}" for op in chain if op["op"] == "map"]


def _checked(dataset) -> int:
    """How many of a map's elements two passes compare: REPEAT_CHECKED, or IMAGES_CHECKED where
    each element is one image (height, width, channels)."""
    spec = dataset.element_spec
    first = spec[0] if isinstance(spec, tuple) and spec else spec
    rank = getattr(getattr(first, "shape", None), "rank", None)
    return IMAGES_CHECKED if rank == 3 else REPEAT_CHECKED


def _repeats(dataset) -> dict:
    """Whether a map's output repeats: its first elements (_checked) made twice, compared by
    digest (child/input_repeats.py), and how many elements it makes (its cardinality: endless, or
    None where TensorFlow cannot tell) and their bytes."""
    import tensorflow as tf

    from gpuscout.child.input_repeats import Unhashable, batch_digest

    facts: dict = {"elements": None, "element_bytes": None, "repeats": None}
    try:
        count = int(tf.data.experimental.cardinality(dataset).numpy())
        facts.update(elements=count if count >= 0 else None, endless=count == tf.data.INFINITE_CARDINALITY)
        checked = _checked(dataset)
        passes = [[batch_digest(e) for e in dataset.take(checked).as_numpy_iterator()] for _ in range(2)]
    except (Unhashable, tf.errors.OpError, TypeError, ValueError) as exc:
        facts["repeats_note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return facts
    first, second = passes
    facts["repeats"] = bool(first) and [d for d, _ in first] == [d for d, _ in second]
    facts["element_bytes"] = max((size for _, size in first), default=None)
    return facts
