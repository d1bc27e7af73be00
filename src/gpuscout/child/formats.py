"""Deployment formats, child side: each turns a built Keras model into a `Server` whose predict
takes a host batch, copies it to the device, runs the forward pass and waits for it (every
request is synchronised with its device). Outputs stay where the runtime leaves them: on the GPU
for the Keras and SavedModel paths (a server reading logits back adds their copy, which for a
language model's logits over its vocabulary can outweigh the model), on the host for LiteRT and
ONNX Runtime. `predict(x, fetch=True)` returns host outputs, for the accuracy check.

- keras: the model's forward pass (training=False) compiled by the backend: jax.jit of
  `stateless_call` (on a GPU the input's copy chosen per batch shape by measure/host_to_device.py),
  or a tf.function (XLA per --xla).
- saved_model: `model.export(format="tf_saved_model")` (Keras' ExportArchive), loaded with
  `tf.saved_model.load`; export and load are timed.
- litert: the LiteRT (TFLite) converter from that SavedModel, in the variant asked for
  (spec.LITERT_VARIANTS), run on the CPU by ai-edge-litert's interpreter (TensorFlow's
  tf.lite.Interpreter when that is not installed) with one thread per core: the edge proxy.
- onnx / tensorrt: `model.export(format="onnx")` run by ONNX Runtime with the CUDA (or TensorRT)
  execution provider on a GPU, else the CPU provider.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscout.core.spec import RunSpec, ServeFormat


@dataclass
class Server:
    predict: Callable[..., object]  # predict(x, fetch=False): synchronised; fetch=True returns host outputs
    device: str  # where the requests run: gpu | cpu
    prepare_s: float  # export/convert and load; 0 for the Keras model itself
    artifact_bytes: int | None  # size of the exported file(s)
    describe: str
    # choose_input_path(x) -> dict: picks how a batch of x's shape reaches the device, before its
    # first request; None where there is one way (host runtimes, TensorFlow's own placement)
    choose_input_path: Callable[[np.ndarray], dict] | None = None


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def keras_server(spec: RunSpec, model, keras) -> Server:
    if spec.backend.value == "jax":
        import jax
        import jax.numpy as jnp

        from gpuscout.child.host_to_device import JaxStager

        trainable = [v.value for v in model.trainable_variables]
        fixed = [v.value for v in model.non_trainable_variables]
        # parts: the input as one device array or as slices to join (JaxStager's split copy)
        forward = jax.jit(
            lambda t, n, parts: model.stateless_call(
                t, n, parts[0] if len(parts) == 1 else jnp.concatenate(parts), training=False
            )[0]
        )
        device = jax.local_devices()[0]
        stager = JaxStager(jax, device)

        def predict(x, fetch=False):
            out = forward(trainable, fixed, stager.put(x)).block_until_ready()
            return np.asarray(out) if fetch else out

        on_gpu = device.platform == "gpu"
        return Server(
            predict,
            "gpu" if on_gpu else "cpu",
            0.0,
            None,
            "jax.jit(Model.stateless_call, training=False)",
            stager.choose if on_gpu else None,
        )
    import tensorflow as tf

    forward = tf.function(lambda x: model(x, training=False), jit_compile=spec.xla, reduce_retracing=True)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    return Server(
        _tf_synchronised(forward),
        "gpu" if on_gpu else "cpu",
        0.0,
        None,
        f"tf.function(Model.__call__, training=False, jit_compile={spec.xla})",
    )


def _tf_synchronised(forward):
    """TensorFlow has no block_until_ready: fetching one element of the output waits for all of it."""

    def predict(x, fetch=False):
        out = forward(x)
        if fetch:
            return out.numpy()
        out[(0,) * len(out.shape)].numpy()
        return out

    return predict


def _export_saved_model(model, workdir: Path) -> Path:
    path = workdir / "saved_model"
    model.export(str(path), format="tf_saved_model", verbose=False)
    return path


def saved_model_server(spec: RunSpec, model, workdir: Path) -> Server:
    import tensorflow as tf

    start = time.monotonic()
    path = _export_saved_model(model, workdir)
    loaded = tf.saved_model.load(str(path))  # the closure below keeps it (and so its variables) alive
    prepare = time.monotonic() - start
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    return Server(
        _tf_synchronised(lambda x: loaded.serve(tf.constant(x))),
        "gpu" if on_gpu else "cpu",
        prepare,
        _size(path),
        "tf.saved_model.load(model.export(format='tf_saved_model')).serve",
    )


def _interpreter_class():
    try:
        from ai_edge_litert.interpreter import Interpreter  # LiteRT, the successor of TFLite

        return Interpreter, "ai_edge_litert"
    except ImportError:
        import tensorflow as tf

        return tf.lite.Interpreter, "tf.lite"


def litert_server(spec: RunSpec, model, workdir: Path, representative: np.ndarray) -> Server:
    import tensorflow as tf

    start = time.monotonic()
    saved = _export_saved_model(model, workdir)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    variant = spec.inference.variant
    if variant != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if variant == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    if variant == "int8":
        # Full integer: activations calibrated on real inputs (LiteRT "Post-training integer quantization").
        def calibration():
            for i in range(min(len(representative), 100)):
                yield [representative[i : i + 1].astype(np.float32)]

        converter.representative_dataset = calibration
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    flat = converter.convert()
    path = workdir / f"model_{variant}.tflite"
    path.write_bytes(flat)
    cls, source = _interpreter_class()
    interpreter = cls(model_path=str(path), num_threads=os.cpu_count() or 1)
    prepare = time.monotonic() - start
    entry = interpreter.get_input_details()[0]["index"]
    sized = [None]

    def predict(x, fetch=False):
        if sized[0] != x.shape:  # the converted model has a fixed batch: resize once per batch size
            interpreter.resize_tensor_input(entry, list(x.shape))
            interpreter.allocate_tensors()
            sized[0] = x.shape
        interpreter.set_tensor(entry, x.astype(np.float32) if x.dtype.kind == "f" else x)
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()

    return Server(
        predict, "cpu", prepare, len(flat), f"{source} Interpreter, LiteRT {variant}, {os.cpu_count()} threads"
    )


def onnx_server(spec: RunSpec, model, workdir: Path) -> Server:
    import onnxruntime as ort

    start = time.monotonic()
    path = workdir / "model.onnx"
    model.export(str(path), format="onnx", verbose=False)
    available = ort.get_available_providers()
    wanted = (
        ("TensorrtExecutionProvider",) if spec.inference.format is ServeFormat.tensorrt else ("CUDAExecutionProvider",)
    )
    if spec.gpu_index is None:
        wanted = ()
    providers = [p for p in wanted if p in available] + ["CPUExecutionProvider"]
    if spec.inference.format is ServeFormat.tensorrt and providers[0] != "TensorrtExecutionProvider":
        raise RuntimeError(
            f"ONNX Runtime here has no TensorRT execution provider (it has {', '.join(available)}): "
            "install onnxruntime-gpu with TensorRT on an NVIDIA GPU"
        )
    session = ort.InferenceSession(str(path), providers=providers)
    name = session.get_inputs()[0].name
    prepare = time.monotonic() - start
    used = session.get_providers()[0]
    return Server(
        lambda x, fetch=False: session.run(None, {name: x})[0],
        "gpu" if used != "CPUExecutionProvider" else "cpu",
        prepare,
        _size(path),
        f"onnxruntime {ort.__version__} InferenceSession, {used}",
    )


def server_for(spec: RunSpec, model, keras, workdir: Path, representative: np.ndarray) -> Server:
    fmt = spec.inference.format
    if fmt is ServeFormat.keras:
        return keras_server(spec, model, keras)
    if fmt is ServeFormat.saved_model:
        return saved_model_server(spec, model, workdir)
    if fmt is ServeFormat.litert:
        return litert_server(spec, model, workdir, representative)
    return onnx_server(spec, model, workdir)
