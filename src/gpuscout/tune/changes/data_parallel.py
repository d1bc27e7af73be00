"""The step on every device the framework sees, set before the first layer is built (jax: Keras'
DataParallel; TensorFlow: a MirroredStrategy made the default strategy), with the global batch
as it is and, for in-memory arrays, as many times larger as there are devices."""

from __future__ import annotations

import ast
from typing import Any

from gpuscout.analysis import devices as devices_analysis
from gpuscout.analysis.devices import DATA_PARALLEL_LINE
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.changes.batch_size import rate_edits
from gpuscout.tune.changes.larger_batch import epoch_steps, fit_batches, learning_rate
from gpuscout.tune.source_edits import Edit, call_at, insert_after_imports, offsets, order, set_keywords


def data_parallel(r: WatchRecord) -> list[Change] | str:
    """The step on every device the framework sees, set before the first layer is built (jax:
    keras.distribution.DataParallel; TensorFlow: a MirroredStrategy made the default strategy):
    with the global batch as it is (each device a 1/N share), and, where fit takes in-memory
    arrays, N times larger (each device the batch one had). Measured as samples/s against the
    one-device runs beside it, like every change."""
    main = main_fit(r)
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
    if fit_batches(main) and main.batch_size:
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


# TensorFlow fixes its devices when a strategy is made: after the script's own device settings
TF_DEVICE_SETTINGS = ("set_memory_growth", "set_logical_device_configuration", "set_visible_devices")


def data_parallel_edits(settings: dict[str, Any], where: Where) -> FileEdits:
    """Every device from the model's first layer on, as tune injected it: jax, Keras' DataParallel
    after the keras import; TensorFlow, a MirroredStrategy as the default strategy after the
    script's own device settings (or its imports). With `batch_size`, fit's batch too."""
    path, line = site(where.sites, "fit", where.root, "called fit")
    text = original(path, where.originals)
    if main_fit(where.baseline).backend == "tensorflow":
        code = (
            "import tensorflow as tf  # every GPU, the global batch split across them\n"
            "tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy())"
        )
        edits = _after_device_settings(text, code) or insert_after_imports(text, code, need_keras=False)
    else:
        edits = insert_after_imports(text, DATA_PARALLEL_LINE, need_keras=True)
    if "batch_size" in settings:
        edits += set_keywords(text, call_at(text, line, "fit"), {"batch_size": str(int(settings["batch_size"]))})
    return [(path, edits), *rate_edits(settings, where)]


def _after_device_settings(text: str, code: str) -> list[Edit]:
    """`code` after the last top-level statement that sets TensorFlow's devices, if any."""
    settings = [
        n
        for n in ast.parse(text).body
        if any(name in (ast.get_source_segment(text, n) or "") for name in TF_DEVICE_SETTINGS)
    ]
    if not settings:
        return []
    where = offsets(text)[settings[-1].end_lineno or settings[-1].lineno]
    return [(where, where, f"{code}\n", next(order))]


class DataParallel(ChangeKind):
    name = "data_parallel"
    listed = 120
    spreads = True
    rule = "the framework sees more devices than the step runs on"

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return data_parallel(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        return data_parallel_edits(change.settings, where)


KIND = DataParallel()
