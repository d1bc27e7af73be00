"""What one `tune -- COMMAND` run applies to the unchanged script, as it crosses into the watched
process (the GPUSCOUT_TUNE variable): typed and checked on both sides of the process boundary,
with the standard library only, because the child imports it inside the user's interpreter.

The parent's plans build each change's settings (tune/changes/); measure/watching.py encodes them
here, so a key no applier reads, or a value of the wrong type, is refused before a run starts,
and child/tune_overrides.py reads attributes, never string keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

ENV = "GPUSCOUT_TUNE"
# The settings applied as Keras' package loads (child/applies' ON_KERAS hooks: a precision policy,
# a distribution). A run with one starts cold: a warm interpreter imports Keras before any run is
# forked from it (measure/series.py), so the hook would run there, its word to gpuscout lost and,
# for a distribution, the devices opened before the fork.
AT_KERAS_IMPORT = ("mixed_precision", "data_parallel")


@dataclass(frozen=True)
class TuneSettings:
    jit_compile: bool = False  # model.compile(jit_compile=True)
    run_eagerly: bool | None = None  # False: Keras' debugging setting (run_eagerly=True) turned off
    steps_per_execution: int | None = None
    mixed_precision: str | None = None  # the global policy: mixed_bfloat16 or mixed_float16
    workers: int | None = None  # a PyDataset's worker threads
    process_workers: int | None = None  # a PyDataset's batches made in this many spawned processes
    parallel_calls: bool = False  # a tf.data pipeline's sequential maps and interleaves made parallel
    cache: bool = False  # the input's batches kept once made
    period: int | None = None  # a generator's: it repeats every `period` batches
    cache_at: str | None = None  # a tf.data map's FILE:LINE, cached after it
    fill_steps: int | None = None  # the steps a cache fills in (judged after them)
    prefetch: bool = False
    prefetch_depth: int = 8  # batches a generator is read ahead
    batch_size: int | None = None
    learning_rate_factor: float | None = None  # the rate for a larger batch ...
    warmup_steps: int | None = None  # ... reached over this many steps (0: none)
    device_batches: bool = False  # in-memory arrays fed from the device
    # augment_in_model: the function by its file and line, the argument it returns as given, the
    # input shape and the layers that do its work on the device (record.watch.SampleFunction's)
    augment_in_model: dict[str, object] | None = None
    # augment_inline: __getitem__ by its file and def line, the attribute and indices it hands its
    # images as read by, and the same input shape and layers (record.watch.InlineAugment's)
    augment_inline: dict[str, object] | None = None
    # augment_map: a tf.data map by its FILE:LINE ("at"), left out where the script wrote it, and the
    # input shape and layers that do its work on the device (record.watch.MapAugment's)
    augment_map: dict[str, object] | None = None
    data_parallel: bool = False
    validation_batch_size: int | None = None  # fit's validation_batch_size (arrays validated)

    def __bool__(self) -> bool:
        """Whether any change is asked for (a plain watch asks none)."""
        return self != TuneSettings()

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> TuneSettings:
        """The settings a plan made; ValueError naming a key no change reads or a value of
        another type than the field's."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"tune settings: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        for name, value in values.items():
            if value is not None and not _fits(value, known[name].type):
                raise ValueError(f"tune settings: {name}={value!r} is not a {known[name].type}")
        given: dict[str, Any] = dict(values)
        return cls(**given)

    def to_json(self) -> str:
        """The settings that differ from a plain run's, as JSON (what GPUSCOUT_TUNE carries)."""
        plain = TuneSettings()
        return json.dumps({k: v for k, v in asdict(self).items() if v != getattr(plain, k)}, sort_keys=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TuneSettings:
        text = environ.get(ENV) or "{}"
        values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError(f"{ENV} holds {type(values).__name__}, not an object of settings")
        return cls.from_dict(values)


# A field's declared type (a string under `from __future__ import annotations`) -> what a value may be
_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "bool | None": (bool,),
    "int | None": (int,),
    "int": (int,),
    "float | None": (int, float),
    "str | None": (str,),
    "dict[str, object] | None": (dict,),
}


def _fits(value: object, declared: object) -> bool:
    allowed = _TYPES[str(declared)]
    if isinstance(value, bool) and bool not in allowed:  # True is an int to Python, not a count
        return False
    return isinstance(value, allowed)
