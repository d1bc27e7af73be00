"""Child process for `gpuscout doctor`: what one backend sees, sent as one "probe" event.

Run as ``python -m gpuscout.child.probe tensorflow|jax``; the parent never imports the frameworks.
"""

from __future__ import annotations

import importlib.util
import sys

from gpuscout.core.events import emit


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def cudnn_paths() -> list[str]:
    """Where a cuDNN library can be found: NVIDIA's pip package in this environment, the
    system's (what a mismatch explanation names as the likely older copy)."""
    import ctypes.util
    import os

    found = []
    try:
        spec = importlib.util.find_spec("nvidia.cudnn")
    except ModuleNotFoundError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        found.append(os.path.join(location, "lib"))
    system = ctypes.util.find_library("cudnn")
    if system:
        found.append(system)
    return found


def _probe_tensorflow() -> dict:
    import tensorflow as tf

    from gpuscout.child.tensorflow_steps import framework_info

    info = framework_info()
    gpus = tf.config.list_physical_devices("GPU")
    info["gpus"] = [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus]
    info["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
    info["cuda_archs"] = list(tf.sysconfig.get_build_info().get("cuda_compute_capabilities") or [])
    info["cudnn_paths"] = cudnn_paths()
    doubled = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    info["xla_ok"] = bool(float(doubled(tf.constant([1.0]))[0]) == 3.0)
    return info


def _probe_jax() -> dict:
    import jax
    import jax.numpy as jnp

    from gpuscout.child.jax_steps import framework_info

    info = framework_info()
    info["gpus"] = [d.device_kind for d in jax.devices() if d.platform == "gpu"]
    info["built_with_cuda"] = any(
        _module_exists(name)
        for name in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
    )
    info["xla_ok"] = bool(float(jax.jit(lambda x: x * 2.0 + 1.0)(jnp.ones(1))[0]) == 3.0)
    info["cudnn_paths"] = cudnn_paths()
    return info


def main() -> int:
    backend = sys.argv[1]
    try:
        info = _probe_tensorflow() if backend == "tensorflow" else _probe_jax()
        info["error"] = None
    except Exception as exc:
        info = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400]}
    emit({"event": "probe", "info": info})
    return 0


if __name__ == "__main__":
    sys.exit(main())
