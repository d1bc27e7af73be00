"""GPU telemetry through NVML (nvidia-ml-py). ``nvml.py`` is the only module that imports pynvml."""
