"""The one place that talks to NVML (nvidia-ml-py's ``pynvml``), or to the fake in tests.

Every query goes through ``_safe``: a field NVML does not support on a GPU is ``None``, never a
crash (DESIGN.md reliability rules). Set ``GPUSCOUT_FAKE_NVML=path.json`` to use the scripted
fake (``telemetry/fake.py``) instead of the real library.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from gpuscout.record.run import ComputeProcess, GpuInfo
from gpuscout.record.run import TelemetrySample as Sample

FAKE_ENV = "GPUSCOUT_FAKE_NVML"

# Clock-event reasons that mean the GPU was slowed down (nvml.h, nvmlClocksEventReason*).
SLOWDOWN_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}


def _load_module():
    fake = os.environ.get(FAKE_ENV)
    if fake:
        from gpuscout.telemetry.fake import FakeNvml

        return FakeNvml.from_file(fake)
    import pynvml

    return pynvml


class Nvml:
    """An opened NVML session. ``available`` is False (and ``error`` says why) without a driver."""

    def __init__(self, module=None) -> None:
        self.error: str | None = None
        self._handles: list = []
        try:
            self._m = module if module is not None else _load_module()
            self._m.nvmlInit()
            count = self._m.nvmlDeviceGetCount()
            self._handles = [self._m.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.available = True
        except Exception as exc:  # NVMLError (no driver/library), ImportError, OSError
            self.available = False
            self.error = _describe(exc)

    def close(self) -> None:
        if self.available:
            self._safe(self._m.nvmlShutdown)
            self.available = False

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _safe(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # NVMLError_NotSupported and friends, or a missing function
            return None

    @property
    def count(self) -> int:
        return len(self._handles)

    def driver_version(self) -> str | None:
        return _text(self._safe(self._m.nvmlSystemGetDriverVersion)) if self.available else None

    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, e.g. "12.4"."""
        if not self.available:
            return None
        value = self._safe(self._m.nvmlSystemGetCudaDriverVersion_v2)
        return None if value is None else f"{value // 1000}.{value % 1000 // 10}"

    def gpu(self, index: int) -> GpuInfo:
        m, h = self._m, self._handles[index]
        cc = self._safe(m.nvmlDeviceGetCudaComputeCapability, h)
        memory = self._safe(m.nvmlDeviceGetMemoryInfo, h)
        limit_mw = self._safe(m.nvmlDeviceGetPowerManagementLimit, h)
        pci = self._safe(m.nvmlDeviceGetPciInfo, h)
        return GpuInfo(
            index=index,
            name=_text(self._safe(m.nvmlDeviceGetName, h)),
            uuid=_text(self._safe(m.nvmlDeviceGetUUID, h)),
            memory_total_bytes=None if memory is None else int(memory.total),
            compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            sm_clock_max_mhz=self._safe(m.nvmlDeviceGetMaxClockInfo, h, m.NVML_CLOCK_SM),
            sm_clock_mhz=self._safe(m.nvmlDeviceGetClockInfo, h, m.NVML_CLOCK_SM),
            pci_bus_id=None if pci is None else _text(pci.busId),
            compute_processes=self.compute_processes(index),
        )

    def gpus(self) -> list[GpuInfo]:
        return [self.gpu(i) for i in range(self.count)]

    def compute_processes(self, index: int) -> list[ComputeProcess]:
        """Compute processes on a GPU. Slow on some drivers: never call it from the sampling loop."""
        procs = self._safe(self._m.nvmlDeviceGetComputeRunningProcesses, self._handles[index]) or []
        return [ComputeProcess(pid=int(p.pid), used_memory_bytes=_int_or_none(p.usedGpuMemory)) for p in procs]

    def active_nvlinks(self, index: int) -> int | None:
        """NVLink links up on a GPU; None when the GPU has no NVLink or NVML cannot tell."""
        m, h = self._m, self._handles[index]
        states = [self._safe(m.nvmlDeviceGetNvLinkState, h, link) for link in range(m.NVML_NVLINK_MAX_LINKS)]
        known = [state for state in states if state is not None]
        return sum(1 for state in known if state == m.NVML_FEATURE_ENABLED) if known else None

    def sample(self, index: int) -> Sample:
        m, h = self._m, self._handles[index]
        util = self._safe(m.nvmlDeviceGetUtilizationRates, h)
        memory = self._safe(m.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._safe(m.nvmlDeviceGetPowerUsage, h)
        reasons = self._safe(m.nvmlDeviceGetCurrentClocksEventReasons, h)
        if reasons is None:  # drivers older than 535 only have the old name
            reasons = self._safe(m.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        return Sample(
            t_monotonic_s=time.monotonic(),
            gpu_util_pct=None if util is None else float(util.gpu),
            memory_util_pct=None if util is None else float(util.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=self._safe(m.nvmlDeviceGetClockInfo, h, m.NVML_CLOCK_SM),
            temperature_c=self._safe(m.nvmlDeviceGetTemperature, h, m.NVML_TEMPERATURE_GPU),
            clock_event_reasons=reasons,
        )


# nvmlGpuTopologyLevel_t (nvml.h): the closest common ancestor of two GPUs on the PCIe tree,
# with the names `nvidia-smi topo -m` prints for them.
TOPOLOGY_LEVELS = {
    0: ("internal", "the same board"),
    10: ("PIX", "one PCIe switch"),
    20: ("PXB", "several PCIe switches"),
    30: ("PHB", "a PCIe host bridge (the CPU)"),
    40: ("NODE", "host bridges within one NUMA node"),
    50: ("SYS", "the link between NUMA nodes (QPI/UPI)"),
}


@dataclass
class Link:
    """How two GPUs reach each other (NVML): NVLink peer-to-peer, else the PCIe path."""

    gpus: tuple[int, int]
    interconnect: str  # "NVLink" or "PCIe"
    nvlinks: tuple[int | None, int | None]  # active NVLink links of each GPU (to a peer or a switch)
    pcie_level: str | None  # TOPOLOGY_LEVELS name of the common ancestor
    pcie_path: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def topology(nvml: Nvml, indices: list[int]) -> list[Link]:
    """Every pair of the given GPUs: NVLink when NVML says peer-to-peer over NVLink works
    (nvmlDeviceGetP2PStatus, NVLINK capability; true through an NVSwitch too), else PCIe."""
    if not nvml.available:
        return []
    m = nvml._m
    links = []
    for n, a in enumerate(indices):
        for b in indices[n + 1 :]:
            ha, hb = nvml._handles[a], nvml._handles[b]
            p2p = nvml._safe(m.nvmlDeviceGetP2PStatus, ha, hb, m.NVML_P2P_CAPS_INDEX_NVLINK)
            level = nvml._safe(m.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            name, path = TOPOLOGY_LEVELS.get(level, (None, None)) if level is not None else (None, None)
            links.append(
                Link(
                    (a, b),
                    "NVLink" if p2p == m.NVML_P2P_STATUS_OK else "PCIe",
                    (nvml.active_nvlinks(a), nvml.active_nvlinks(b)),
                    name,
                    path,
                )
            )
    return links


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "NVML Shared Library Not Found" in text or "Driver Not Loaded" in text or "libnvidia-ml" in text:
        return f"no NVIDIA driver found ({text})"
    return text


def slowdown_names(reasons: int | None) -> list[str]:
    if not reasons:
        return []
    return [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]
