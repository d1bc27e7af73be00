"""The patch's edits for a larger batch (tune/patch.py writes the rest): every device used (Keras'
DataParallel on jax, a MirroredStrategy on TensorFlow) and the learning rate scaled and warmed up as
the runs trained it; and where in the user's files a call the baseline saw is."""

from __future__ import annotations

import ast
from pathlib import Path

from gpuscout.analysis.devices import DATA_PARALLEL_LINE
from gpuscout.analysis.repeats import definition
from gpuscout.record.watch import CallSite, WatchRecord
from gpuscout.tune.source_edits import (
    Edit,
    NotLocated,
    after_statement,
    call_at,
    insert_after_imports,
    offsets,
    order,
    set_keywords,
)


def site(sites: dict, kind: str, root: Path, what: str) -> tuple[Path, int]:
    seen: CallSite | None = sites.get(kind)
    if seen is None:
        raise NotLocated(f"where the script {what} was not seen")
    path = Path(seen.file).resolve()
    if not path.is_file() or root not in path.parents:
        raise NotLocated(f"{what} is in {seen.file}, outside the script's folder {root}")
    return path, seen.line


def original(path: Path, originals: dict[Path, str]) -> str:
    if path not in originals:
        originals[path] = path.read_text()
    return originals[path]


# TensorFlow fixes its devices when a strategy is made: after the script's own device settings
TF_DEVICE_SETTINGS = ("set_memory_growth", "set_logical_device_configuration", "set_visible_devices")


def data_parallel_edits(
    settings: dict, sites: dict, baseline: WatchRecord, root: Path, originals: dict[Path, str]
) -> list[tuple[Path, list[Edit]]]:
    """Every device from the model's first layer on, as tune injected it: jax, Keras' DataParallel
    after the keras import; TensorFlow, a MirroredStrategy as the default strategy after the
    script's own device settings (or its imports). With `batch_size`, fit's batch too."""
    path, line = site(sites, "fit", root, "called fit")
    text = original(path, originals)
    if baseline.main.backend == "tensorflow":
        code = (
            "import tensorflow as tf  # every GPU, the global batch split across them\n"
            "tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy())"
        )
        edits = _after_device_settings(text, code) or insert_after_imports(text, code, need_keras=False)
    else:
        edits = insert_after_imports(text, DATA_PARALLEL_LINE, need_keras=True)
    if "batch_size" in settings:
        edits += set_keywords(text, call_at(text, line, "fit"), {"batch_size": str(int(settings["batch_size"]))})
    return [(path, edits), *rate_edits(settings, sites, root, originals)]


def rate_edits(settings: dict, sites: dict, root: Path, originals: dict[Path, str]) -> list[tuple[Path, list[Edit]]]:
    """The learning rate scaled for a larger batch, as the runs trained it: after the statement
    that compiled the model (the optimizer exists from there), on that model's optimizer."""
    factor = settings.get("learning_rate_factor")
    if not factor:
        return []
    path, line = site(sites, "compile", root, "compiled the model")
    text = original(path, originals)
    call = call_at(text, line, "compile")
    model = ast.get_source_segment(text, call.func.value) if isinstance(call.func, ast.Attribute) else None
    if not model:
        raise NotLocated("compile is not called on a model by name: where its optimizer is cannot be read")
    code = f"scaled_learning_rate({model}.optimizer, {factor:g}, warmup_steps={int(settings['warmup_steps'])})"
    return [
        (
            path,
            after_statement(text, call, code + "  # the rate for the larger batch")
            + insert_after_imports(text, definition("WarmedUpRate"), need_keras=True, name="WarmedUpRate")
            + insert_after_imports(
                text, definition("scaled_learning_rate"), need_keras=True, name="scaled_learning_rate"
            ),
        )
    ]


def _after_device_settings(text: str, code: str) -> list[Edit]:
    """`code` after the last top-level statement that sets TensorFlow's devices, if any."""
    settings = [
        n
        for n in ast.parse(text).body
        if any(name in (ast.get_source_segment(text, n) or "") for name in TF_DEVICE_SETTINGS)
    ]
    if not settings:
        return []
    where = offsets(text)[settings[-1].end_lineno]
    return [(where, where, f"{code}\n", next(order))]
