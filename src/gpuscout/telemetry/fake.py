"""A scripted stand-in for pynvml, for tests and for trying gpuscout without a GPU.

Point ``GPUSCOUT_FAKE_NVML`` at a JSON file::

    {"driver_version": "550.54.15", "cuda_driver_version": 12040,
     "init_error": null,                      # e.g. "Driver Not Loaded" to act as no driver
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "memory_total_bytes": 85899345920,
               "compute_capability": [9, 0], "power_limit_w": 700, "sm_clock_max_mhz": 1980,
               "sm_clock_mhz": 1980, "utilization_pct": 98, "power_w": 600, "temperature_c": 60,
               "memory_used_bytes": 1000000, "clock_event_reasons": 0,
               "processes": [{"pid": 4242, "used_memory_bytes": 1000}],
               "unsupported": ["power_w"], "nvlinks": 18}],
     "topology": {"nvlink": true, "level": 50}}   # between any two GPUs: NVLink P2P, PCIe level

Fields named in "unsupported", or left out, raise NVMLError_NotSupported, as real NVML does
for what a GPU does not report. A number may also be a schedule, [[seconds, value], ...]: from
that many seconds after the fake was made on, the value (a GPU idle through a script's start-up,
then busy: "utilization_pct": [[0, 0], [1.5, 60]]).
The error classes are pynvml's own, so code that catches them is exercised for real.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pynvml


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED

    def __init__(self, config: dict) -> None:
        self.config = config
        self.gpus = config.get("gpus", [])
        self.made = time.monotonic()

    @classmethod
    def from_file(cls, path: str) -> FakeNvml:
        with open(path, encoding="utf-8") as handle:
            return cls(json.load(handle))

    def _field(self, handle: int, name: str):
        gpu = self.gpus[handle]
        if name in gpu.get("unsupported", []) or name not in gpu:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        value = gpu[name]
        if isinstance(value, list) and value and isinstance(value[0], list):  # a schedule
            elapsed = time.monotonic() - self.made
            return next((v for t, v in reversed(value) if elapsed >= t), value[0][1])
        return value

    def nvmlInit(self) -> None:
        if self.config.get("init_error"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.config.get("driver_version", "550.54.15")

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self.config.get("cuda_driver_version", 12040))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetName(self, h):
        return self._field(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._field(h, "uuid")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(
            total=self._field(h, "memory_total_bytes"), used=self.gpus[h].get("memory_used_bytes", 0)
        )

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._field(h, "compute_capability"))

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return int(self._field(h, "power_limit_w") * 1000)

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._field(h, "sm_clock_max_mhz")

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._field(h, "sm_clock_mhz")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h + 1:02X}:00.0")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used_memory_bytes"))
            for p in self.gpus[h].get("processes", [])
        ]

    def nvmlDeviceGetUtilizationRates(self, h):
        value = self._field(h, "utilization_pct")
        return SimpleNamespace(gpu=value, memory=value)

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self._field(h, "power_w") * 1000)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._field(h, "temperature_c")

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self._field(h, "nvlinks"):  # links past a GPU's count do not exist
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetP2PStatus(self, h1, h2, capability):
        linked = self.config.get("topology", {}).get("nvlink", False)
        return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        return self.config.get("topology", {}).get("level", pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._field(h, "clock_event_reasons")
