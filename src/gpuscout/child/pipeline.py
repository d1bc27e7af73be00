"""An input pipeline alone, no model (child side): how many samples per second it delivers.

The built-in host pipeline (measure/data.py + backends' tf_dataset) with a given number of map
threads, or the user's own `make_dataset()` (`tune --pipeline file.py:make_dataset`), which must
return a batched tf.data.Dataset. After a warm-up of WARMUP_BATCHES batches, batches are pulled
for at least `window_seconds` per window; the rate is samples (the batches' leading dimension)
per second.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

from gpuscout.child import data
from gpuscout.core.spec import RunSpec
from gpuscout.record.child import ChildResult
from gpuscout.workloads.base import Workload

WARMUP_BATCHES = 5


def _user_dataset(reference: str):
    path, _, function = reference.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"gpuscout_pipeline_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make = getattr(module, function, None)
    if not callable(make):
        raise ValueError(f"{Path(path).name} has no function {function}()")
    dataset = make()
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"{function}() returned {type(dataset).__name__}, not a tf.data.Dataset")
    return dataset


def _leading(batch) -> int:
    first = (
        batch[0]
        if isinstance(batch, (tuple, list))
        else (next(iter(batch.values())) if isinstance(batch, dict) else batch)
    )
    return int(first.shape[0])


def measure_pipeline(spec: RunSpec, workload: Workload | None, emit: Callable[[dict], None]) -> ChildResult:
    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    if spec.user_pipeline:
        iterator = iter(_user_dataset(spec.user_pipeline).repeat())
        source = spec.user_pipeline
    else:
        x, y = data.host_dataset(workload, spec.batch_size, spec.seed, spec.seq_len)
        if tf is not None:
            tf.config.set_visible_devices([], "GPU")
            from gpuscout.child.tensorflow_steps import tf_dataset

            iterator = iter(tf_dataset(tf, x, y, spec, workload))
        else:
            iterator = data.numpy_pipeline(x, y, spec, workload)
        source = f"built-in {spec.data.value} pipeline, {spec.pipeline_threads or 'AUTOTUNE'} map threads"
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    windows = []
    for index in range(spec.windows):
        start = time.monotonic()
        samples = batches = 0
        while batches < spec.window_steps or time.monotonic() - start < spec.window_seconds:
            samples += _leading(next(iterator))
            batches += 1
        end = time.monotonic()
        windows.append(
            {
                "index": index,
                "start_monotonic_s": start,
                "end_monotonic_s": end,
                "steps": batches,
                "samples": samples,
                "input_wait_s": end - start,
            }
        )
        emit({"event": "window", "index": index, "of": spec.windows, "throughput": samples / (end - start)})
    return ChildResult.model_validate({"pipeline_source": source, "windows": windows})
