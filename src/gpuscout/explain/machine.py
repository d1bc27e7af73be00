"""What a fix needs to know about the machine and the run: from `gpuscout doctor`'s report
(doctor --explain) or from a run's own record (a failed bench, tune, scale or sweep run)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

# Environment variables that change how the frameworks take GPU memory or find CUDA
ENV_KEYS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    # where keras.utils.get_file keeps downloads, and the proxies a download goes through
    "KERAS_HOME",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
)


@dataclass
class Gpu:
    index: int
    name: str | None
    memory_total_bytes: int | None
    compute_capability: str | None
    others_bytes: int | None = None  # memory held by other processes (NVML), None when unknown
    other_pids: list[int] = field(default_factory=list)


@dataclass
class Framework:
    name: str  # tensorflow | jax
    version: str | None
    cuda_version: str | None = None  # built against (TensorFlow) / loaded (jax)
    cudnn_version: str | None = None
    built_with_cuda: bool | None = None
    gpus_seen: int | None = None
    cuda_archs: list[str] = field(default_factory=list)  # e.g. sm_80, compute_90 (TensorFlow's build info)
    cudnn_paths: list[str] = field(default_factory=list)  # where a libcudnn was found (pip package, system)


def _frameworks(report: dict) -> dict[str, Framework]:
    """Each started framework's facts in doctor's report (those that failed to start left out)."""
    return {
        b["name"]: Framework(
            b["name"],
            b.get("backend_version"),
            b.get("cuda_version"),
            b.get("cudnn_version"),
            b.get("built_with_cuda"),
            len(b.get("gpus") or []),
            list(b.get("cuda_archs") or []),
            list(b.get("cudnn_paths") or []),
        )
        for b in report.get("backends", [])
        if b.get("installed") and not b.get("error")
    }


class LazyFrameworks(Mapping):
    """The frameworks' facts, probed on first use: reading a log needs them only where its cause
    does (a CUDA or cuDNN version, the build), and starting each framework takes seconds and most of
    a gigabyte (issue 79, item 10: 17-27 s and 825 MB for any log, an empty one included)."""

    def __init__(self, load: Callable[[], dict[str, Framework]]) -> None:
        self._load, self._found = load, None

    @property
    def probed(self) -> bool:
        return self._found is not None

    def _facts(self) -> dict[str, Framework]:
        if self._found is None:
            self._found = self._load()
        return self._found

    def __getitem__(self, name: str) -> Framework:
        return self._facts()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts())

    def __len__(self) -> int:
        return len(self._facts())


@dataclass
class Machine:
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports
    gpus: list[Gpu] = field(default_factory=list)
    frameworks: Mapping[str, Framework] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    installed: list[str] = field(default_factory=list)  # the frameworks installed, known without starting one

    @classmethod
    def from_doctor(cls, report: dict, env: dict[str, str], probe: Callable[[], dict] | None = None) -> Machine:
        """From doctor's report; where its frameworks were not started (run_doctor(start=False)),
        `probe` starts them on first use and gives the whole report."""
        gpus = []
        for g in report.get("gpus", []):
            processes = g.get("compute_processes") or []
            used = [p.get("used_memory_bytes") for p in processes]
            gpus.append(
                Gpu(
                    g["index"],
                    g.get("name"),
                    g.get("memory_total_bytes"),
                    g.get("compute_capability"),
                    sum(u for u in used if u) if processes else 0,
                    [p["pid"] for p in processes],
                )
            )
        installed = [b["name"] for b in report.get("backends", []) if b.get("installed")]
        if probe is not None and not report.get("started", True):
            return cls(
                report.get("driver_version"),
                report.get("cuda_driver_version"),
                gpus,
                LazyFrameworks(lambda: _frameworks(probe())),
                {k: v for k, v in env.items() if k in ENV_KEYS},
                installed,
            )
        return cls(
            report.get("driver_version"),
            report.get("cuda_driver_version"),
            gpus,
            _frameworks(report),
            {k: v for k, v in env.items() if k in ENV_KEYS},
            installed,
        )

    @classmethod
    def from_record(cls, env, gpu, framework) -> Machine:
        """From a run's Environment, first GpuInfo and FrameworkInfo (record parts)."""
        gpus = []
        if gpu is not None:
            used = [p.used_memory_bytes for p in gpu.compute_processes]
            gpus.append(
                Gpu(
                    gpu.index,
                    gpu.name,
                    gpu.memory_total_bytes,
                    gpu.compute_capability,
                    sum(u for u in used if u),
                    [p.pid for p in gpu.compute_processes],
                )
            )
        frameworks = {}
        if framework is not None and framework.backend:
            frameworks[framework.backend] = Framework(
                framework.backend,
                framework.backend_version,
                framework.cuda_version,
                framework.cudnn_version,
                gpus_seen=len(framework.devices) if framework.platform == "gpu" else 0,
            )
        return cls(
            env.driver_version,
            env.cuda_driver_version,
            gpus,
            frameworks,
            {k: v for k, v in env.child_env.items() if k in ENV_KEYS},
        )


@dataclass
class Context:
    """The run the log came from, when known: the OOM fix then names a batch that fits."""

    workload: str | None = None
    batch_size: int | None = None  # per device
    precision: str | None = None
    seq_len: int | None = None
    framework: str | None = None  # tensorflow | jax
