"""Host-side provenance recorded with every run (the child adds the framework's part)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys

import psutil

from gpuscout.core.versions import METHODOLOGY_VERSION, SCHEMA_VERSION, __version__

# Environment variables that change how a framework runs; recorded as the child saw them.
_RELEVANT_PREFIXES = ("XLA_", "TF_", "JAX_", "KERAS_", "CUDA_", "NCCL_", "NVIDIA_TF32")


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(_RELEVANT_PREFIXES)}


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def host_provenance(nvml) -> dict:
    return {
        "gpuscout_version": __version__,
        "methodology_version": METHODOLOGY_VERSION,
        "schema_version": SCHEMA_VERSION,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "host_memory_bytes": psutil.virtual_memory().total,
        "driver_version": nvml.driver_version() if nvml.available else None,
        "cuda_driver_version": nvml.cuda_driver_version() if nvml.available else None,
        "nvml_error": nvml.error,
        "command_line": " ".join(["gpuscout", *sys.argv[1:]]),
    }
