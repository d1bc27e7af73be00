"""What a fix needs to know about the machine and the run: from `gpuscout doctor`'s report
(doctor --explain) or from a run's own record (a failed bench, tune, scale or sweep run)."""

from __future__ import annotations

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


@dataclass
class Machine:
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports
    gpus: list[Gpu] = field(default_factory=list)
    frameworks: dict[str, Framework] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_doctor(cls, report: dict, env: dict[str, str]) -> Machine:
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
        frameworks = {}
        for b in report.get("backends", []):
            if b.get("installed") and not b.get("error"):
                frameworks[b["name"]] = Framework(
                    b["name"],
                    b.get("backend_version"),
                    b.get("cuda_version"),
                    b.get("cudnn_version"),
                    b.get("built_with_cuda"),
                    len(b.get("gpus") or []),
                    list(b.get("cuda_archs") or []),
                    list(b.get("cudnn_paths") or []),
                )
        return cls(
            report.get("driver_version"),
            report.get("cuda_driver_version"),
            gpus,
            frameworks,
            {k: v for k, v in env.items() if k in ENV_KEYS},
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
