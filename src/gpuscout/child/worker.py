"""The child process: one run, measured by the protocol, reported as events (gpuscout.core.events).

Started by gpuscout.executor.local as ``python -m gpuscout.child.worker SPEC.json`` with the
environment already set (KERAS_BACKEND, CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH ...):
Keras fixes its backend at import, so nothing here imports it before main() runs.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import traceback
import types

from gpuscout.child import compilation_cache
from gpuscout.core.events import emit
from gpuscout.core.failures import classify_failure
from gpuscout.core.spec import Backend, RunSpec, Task
from gpuscout.record.child import ChildResult, FrameworkInfo


def _backend_module(backend: Backend):
    if backend is Backend.jax:
        from gpuscout.child import jax_steps as module
    else:
        from gpuscout.child import tensorflow_steps as module
    return module


def set_seed(keras, seed: int) -> None:
    """keras.utils.set_random_seed, without importing TensorFlow into a child of another backend:
    Keras 3 seeds TensorFlow whenever it is installed (keras/src/utils/rng_utils.py, `if
    tf.available`), which imports it, 2.3 s of every jax child on a machine that has both (measured
    with python -X importtime). A jax child that builds a tf.data pipeline seeds it there itself."""
    if keras.backend.backend() == "tensorflow" or "tensorflow" in sys.modules:
        keras.utils.set_random_seed(seed)
        return
    try:
        from keras.src.utils import rng_utils
    except ImportError:  # another Keras layout: its own call, TensorFlow and all
        keras.utils.set_random_seed(seed)
        return
    installed = getattr(rng_utils, "tf", None)
    rng_utils.tf = types.SimpleNamespace(available=False)
    try:
        keras.utils.set_random_seed(seed)
    finally:
        rng_utils.tf = installed


# What Keras imports wherever it is installed and no measuring child uses: matplotlib.pyplot (its
# image-gallery plot), pandas (DataFrames as fit's input, keras/src/trainers/data_adapters/
# array_slicing.py), scikit-learn (its wrappers, which pull in scipy.stats) and IPython (the saved
# file editor's notebook display, keras/src/saving/file_editor.py). gpuscout's own report, MLflow
# and the notebook extra install them beside it: `import keras` took 4.5-5.0 s on the CI's CPU,
# 2.9-3.5 s with the first three hidden (2026-12-02); IPython was 0.23 s more (2026-12-08).
HIDDEN_FROM_KERAS = ("matplotlib", "pandas", "sklearn", "IPython")


def import_keras():
    """Keras, imported with HIDDEN_FROM_KERAS hidden from it (each `import` of them raises
    ImportError, which Keras expects of a package not installed). Hidden from that one import
    only, and only where not imported yet: a user's model file that imports matplotlib later gets
    it (and Keras' gallery says matplotlib is missing, which no child calls); gpuscout's children
    feed fit arrays, never DataFrames."""
    if "keras" in sys.modules:
        return sys.modules["keras"]
    hidden = [name for name in HIDDEN_FROM_KERAS if name not in sys.modules]
    sys.modules.update(dict.fromkeys(hidden))
    try:
        import keras
    finally:
        for name in hidden:
            del sys.modules[name]
    return keras


def measure(spec: RunSpec) -> ChildResult:
    from gpuscout.workloads import get

    if spec.task is Task.pipeline:  # an input pipeline alone: no model, so no Keras to import
        from gpuscout.child.pipeline import measure_pipeline

        return measure_pipeline(spec, None if spec.user_pipeline else get(spec.workload), emit)
    module = _backend_module(spec.backend)
    if spec.compilation_cache is not None:  # before the first program compiles
        compilation_cache.start(spec.compilation_cache)
    module.configure_devices(spec)  # before the framework starts: logical CPUs, the strategy
    keras = import_keras()
    set_seed(keras, spec.seed)
    keras.mixed_precision.set_global_policy(spec.precision.keras_policy)
    if spec.task is Task.inspect:
        from gpuscout.child import user_model

        return ChildResult(
            model_info=user_model.inspect(spec.model, keras, spec.precision.keras_policy), pid=os.getpid()
        )
    if spec.model is not None:
        from gpuscout.child import user_model

        model, given = user_model.load(spec.model, keras, spec.precision.keras_policy)
        workload, _ = user_model.resolve(model, given, keras)
    else:
        workload = get(spec.workload)
    framework = FrameworkInfo(**module.framework_info(), keras_version=keras.__version__, backend=spec.backend.value)
    if spec.gpu_index is not None and framework.platform != "gpu":
        raise RuntimeError(
            f"the {spec.backend.value} backend sees no GPU (a CPU-only build, or CUDA libraries "
            "missing): run `gpuscout doctor` for the fix, or pass --cpu"
        )
    emit({"event": "started", "framework": framework.model_dump()})
    if spec.task is Task.infer:  # tasks with a loop of their own, not the protocol's
        from gpuscout.child.inference import run_inference

        result = run_inference(spec, workload, keras, emit)
    elif spec.task is Task.to_accuracy:
        from gpuscout.child.accuracy import train_to_accuracy

        result = train_to_accuracy(spec, workload, keras, emit)
    else:
        from gpuscout.child.protocol import run_protocol

        runner = module.build_runner(spec, workload, keras)
        result = run_protocol(
            runner,
            batch_size=spec.batch_size,
            warmup_steps=spec.warmup_steps,
            windows=spec.windows,
            window_steps=spec.window_steps,
            window_seconds=spec.window_seconds,
            on_event=emit,
        )
    return result.model_copy(
        update={
            "peak_memory_bytes": module.device_peak_memory_bytes(),
            "host_peak_rss_bytes": _host_peak_rss_bytes(),
            "framework": framework,
            "pid": os.getpid(),
            "compilation_cache": compilation_cache.use(),
        }
    )


def _host_peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux (getrusage(2))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], encoding="utf-8") as handle:
        spec = RunSpec.model_validate_json(handle.read())
    try:
        emit({"event": "result", "result": measure(spec).model_dump(mode="json")})
        # What a run left in reference cycles (a tf.data iterator over a Python function: a
        # user's pipeline with tf.py_function) is freed now: finalised during interpreter
        # shutdown it can wait forever for the interpreter (TensorFlow 2.21; tensorflow#21277).
        gc.collect()
        return 0
    except Exception as exc:  # the parent records it; the traceback goes to stderr for the tail
        text = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        emit(
            {
                "event": "error",
                "kind": classify_failure(text + traceback.format_exc()),
                "message": text.splitlines()[0][:500] if text else type(exc).__name__,
            }
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
