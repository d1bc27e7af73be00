"""The doctor's checks: Python, the driver, each GPU, and each backend probed in a child of its own
(gpuscout.child.probe), each ok / warn / fail with a one-line fix."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuscout import catalog
from gpuscout.core import backends
from gpuscout.core.spec import Backend
from gpuscout.core.versions import __version__
from gpuscout.executor import process
from gpuscout.telemetry.nvml import Nvml

PROBE_TIMEOUT_S = 180
# A JSON file {"tensorflow": {probe info} | null, "jax": ...} used instead of the probe children
# (tests: framework build facts without the frameworks; a backend left out is not installed)
FAKE_PROBES_ENV = "GPUSCOUT_FAKE_PROBES"


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    message: str
    fix: str | None = None


def probe_backend(backend: Backend) -> dict:
    """Run the probe child for one backend; never raises."""
    env = dict(
        os.environ,
        KERAS_BACKEND=backend.value,
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_FORCE_GPU_ALLOW_GROWTH="true",
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    finished, output = process.run_captured(
        [sys.executable, "-m", "gpuscout.child.probe", backend.value], env=env, timeout_s=PROBE_TIMEOUT_S
    )
    if finished.timed_out:
        return {"error": f"the {backend.value} probe did not finish in {PROBE_TIMEOUT_S} s"}
    found = next((e["info"] for e in finished.events if e["event"] == "probe"), None)
    if found is not None:
        return found
    tail = (output.strip().splitlines() or ["no output"])[-1]
    return {"error": f"the {backend.value} probe crashed (exit {finished.returncode}): {tail}"}


def tensor_core_paths(compute_capability: str | None) -> list[str]:
    """Tensor-core precisions by compute capability (CUDA C++ Programming Guide, Table
    "Technical Specifications per Compute Capability"): fp16 from Volta (7.0), bf16 and tf32
    from Ampere (8.0)."""
    if compute_capability is None:
        return []
    cc = float(compute_capability)
    return (["fp16"] if cc >= 7.0 else []) + (["bf16", "tf32"] if cc >= 8.0 else [])


def run_doctor(start: bool = True) -> dict:
    """This machine's checks: NVML's GPUs and driver, and each installed backend started in a probe
    child (`start`); without it (what reading a log needs first), each backend is named as installed,
    its version read from its metadata, and not started."""
    with Nvml() as nvml:
        gpus = nvml.gpus() if nvml.available else []
        driver, cuda_driver = nvml.driver_version(), nvml.cuda_driver_version()
        nvml_error = nvml.error
    fake = os.environ.get(FAKE_PROBES_ENV)
    scripted = json.loads(Path(fake).read_text()) if fake else None
    if scripted is not None:
        present = [b for b in Backend if scripted.get(b.value) is not None]
    else:
        present = [b for b in Backend if backends.is_installed(b)]
    if not start:
        probes = {}
    elif scripted is not None:
        probes = {b: scripted[b.value] for b in present}
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            probes = dict(zip(present, pool.map(probe_backend, present)))

    keras = keras_setup(os.environ)
    checks = [_python_check(), _keras_check(keras, present), _driver_check(driver, cuda_driver, nvml_error, gpus)]
    for gpu in gpus:
        checks.extend(_gpu_checks(gpu))
    for backend in Backend:
        if not start and backend in present:
            checks.append(_unstarted(backend))
        else:
            checks.extend(_backend_checks(backend, probes.get(backend), gpus, cuda_driver))
    if not present:
        checks.append(
            Check(
                "backends",
                "fail",
                "neither tensorflow nor jax is installed",
                "pip install 'gpuscout[tensorflow]' or 'gpuscout[jax]'",
            )
        )
    return {
        "gpuscout_version": __version__,
        "python": platform.python_version(),
        "driver_version": driver,
        "cuda_driver_version": cuda_driver,
        "keras": keras,
        "started": start,  # the backends were started (their builds, CUDA and GPUs checked)
        "backends": [{"name": b.value, "installed": b in present, **(probes.get(b) or {})} for b in Backend],
        "gpus": [
            {
                **g.model_dump(),
                "tensor_cores": tensor_core_paths(g.compute_capability),
                "catalog_id": getattr(catalog.match(g.name), "id", None),
            }
            for g in gpus
        ],
        "checks": [asdict(c) for c in checks],
    }


def _unstarted(backend: Backend) -> Check:
    name = backend.value
    # the distributions each is installed as (TensorFlow's CPU and nightly builds have names of their own)
    packages = ("tensorflow", "tensorflow-cpu", "tf-nightly") if backend is Backend.tensorflow else ("jax",)
    version = ""
    for package in packages:
        try:
            version = f" {importlib.metadata.version(package)}"
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return Check(
        name, "skip", f"{name}{version} installed, not started", "`gpuscout doctor` starts it and checks its build"
    )


def keras_setup(env) -> dict:
    """Keras' version (from its package's metadata: Keras is not imported here) and the backend a
    script of this user's would get: KERAS_BACKEND, else the `backend` of KERAS_HOME's keras.json
    (~/.keras), else Keras' default, tensorflow (keras/src/backend/config.py reads them in this order)."""
    try:
        version = importlib.metadata.version("keras")
    except importlib.metadata.PackageNotFoundError:
        version = None
    config = Path(env.get("KERAS_HOME") or Path.home() / ".keras") / "keras.json"
    if env.get("KERAS_BACKEND"):
        backend, source = env["KERAS_BACKEND"], "KERAS_BACKEND"
    else:
        try:
            backend, source = json.loads(config.read_text())["backend"], str(config)
        except (OSError, ValueError, KeyError, TypeError):
            backend, source = "tensorflow", "Keras' default"
    return {"version": version, "backend": backend, "backend_from": source}


def _keras_check(keras: dict, present: list[Backend]) -> Check:
    version, backend, source = keras["version"], keras["backend"], keras["backend_from"]
    if version is None:
        return Check(
            "keras",
            "fail",
            "Keras is not installed",
            "pip install 'gpuscout[jax]' (or [tensorflow]): Keras 3 comes with it",
        )
    if int(version.split(".")[0]) < 3:
        return Check("keras", "fail", f"Keras {version}: gpuscout reads Keras 3's fit", "pip install -U 'keras>=3'")
    said = f"Keras {version}, backend {backend} (from {source})"
    installed = {b.value for b in present}
    if backend in ("tensorflow", "jax") and backend not in installed:
        other = next(iter(installed), None)
        fix = f"pip install 'gpuscout[{backend}]'" + (f", or export KERAS_BACKEND={other}" if other else "")
        return Check("keras", "fail", f"{said}, which is not installed: a script would fail at `import keras`", fix)
    if backend not in ("tensorflow", "jax"):
        return Check(
            "keras", "warn", f"{said}: gpuscout measures tensorflow and jax", "export KERAS_BACKEND=jax (or tensorflow)"
        )
    return Check("keras", "ok", said)


def _python_check() -> Check:
    ok = sys.version_info >= (3, 10)
    return Check(
        "python",
        "ok" if ok else "fail",
        f"Python {platform.python_version()}",
        None if ok else "use Python 3.10 or newer",
    )


def _driver_check(driver, cuda_driver, error, gpus) -> Check:
    if driver is None:
        return Check(
            "nvidia driver",
            "warn",
            f"no NVIDIA GPU found: NVML is not available ({error}); gpuscout will benchmark on the CPU",
            "on a GPU machine, install the NVIDIA driver (nvidia-smi must work)",
        )
    if not gpus:
        return Check(
            "nvidia driver",
            "warn",
            f"driver {driver} loaded but it reports no GPU",
            "check `nvidia-smi` and that the GPU is passed through to this machine/container",
        )
    return Check("nvidia driver", "ok", f"driver {driver} (supports CUDA up to {cuda_driver}), {len(gpus)} GPU(s)")


def _gpu_checks(gpu) -> list[Check]:
    name = f"gpu {gpu.index}"
    paths = tensor_core_paths(gpu.compute_capability)
    memory = f"{gpu.memory_total_bytes / 2**30:.0f} GiB" if gpu.memory_total_bytes else "memory unknown"
    clocks = f"SM {gpu.sm_clock_mhz}/{gpu.sm_clock_max_mhz} MHz"
    power = f"power limit {gpu.power_limit_w:.0f} W" if gpu.power_limit_w else "power limit unknown"
    checks = [
        Check(
            name,
            "ok" if paths else "warn",
            f"{gpu.name}, {memory}, compute capability {gpu.compute_capability}, {power}, {clocks}; "
            f"Tensor Cores: {', '.join(paths) if paths else 'none'}",
            None if paths else "mixed precision will not speed training up on this GPU",
        )
    ]
    if gpu.compute_processes:
        pids = ", ".join(str(p.pid) for p in gpu.compute_processes)
        checks.append(
            Check(
                f"{name} busy",
                "warn",
                f"{len(gpu.compute_processes)} other compute process(es) on it (pids {pids})",
                "benchmarks on a shared GPU are flagged gpu_shared: stop them (nvidia-smi) "
                "or pick an idle GPU with --gpu",
            )
        )
    if catalog.match(gpu.name) is None:
        checks.append(
            Check(
                f"{name} catalog",
                "warn",
                f"{gpu.name!r} is not in gpuscout's GPU table: MFU will be empty",
                "add an entry to gpuscout/catalog/gpus.toml (dense peaks with their source)",
            )
        )
    return checks


def _backend_checks(backend: Backend, probe: dict | None, gpus, cuda_driver) -> list[Check]:
    name = backend.value
    if probe is None:
        return [Check(name, "warn", f"{name} is not installed", backends.INSTALL_HINT[backend])]
    if probe.get("error"):
        return [
            Check(
                name,
                "fail",
                f"{name} fails to start: {probe['error']}",
                f"reinstall it: {backends.INSTALL_HINT[backend]}",
            )
        ]
    version = probe.get("backend_version")
    build = (
        f"CUDA {probe.get('cuda_version')}, cuDNN {probe.get('cudnn_version')}"
        if probe.get("cuda_version")
        else ("CUDA build" if probe.get("built_with_cuda") else "CPU-only build")
    )
    seen = probe.get("gpus") or []
    checks = []
    if not gpus:
        checks.append(Check(name, "ok", f"{name} {version} ({build}) runs on the CPU"))
    elif seen:
        checks.append(Check(name, "ok", f"{name} {version} ({build}) sees {len(seen)} GPU(s): {', '.join(seen)}"))
    else:
        checks.append(_invisible_gpu(backend, version, probe, cuda_driver))
    checks.append(
        Check(
            f"{name} xla",
            "ok" if probe.get("xla_ok") else "fail",
            "XLA compiles and runs a small function"
            if probe.get("xla_ok")
            else "XLA failed to compile a small function",
            None if probe.get("xla_ok") else f"reinstall {name}: {backends.INSTALL_HINT[backend]}",
        )
    )
    return checks


def _invisible_gpu(backend: Backend, version, probe: dict, cuda_driver) -> Check:
    name = backend.value
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return Check(
            name,
            "fail",
            f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from {name}",
            "unset CUDA_VISIBLE_DEVICES (gpuscout sets it per run from --gpu)",
        )
    if not probe.get("built_with_cuda"):
        fix = (
            "pip uninstall tensorflow-cpu && pip install 'gpuscout[gpu]' (tensorflow[and-cuda])"
            if backend is Backend.tensorflow
            else "pip install -U 'gpuscout[jax-gpu]' (jax[cuda12])"
        )
        return Check(name, "fail", f"{name} {version} is a CPU-only build: it cannot use the GPU", fix)
    built, supported = backends.version_tuple(probe.get("cuda_version")), backends.version_tuple(cuda_driver)
    if built and supported and built > supported:
        return Check(
            name,
            "fail",
            f"{name} {version} was built for CUDA {probe.get('cuda_version')}, but the driver "
            f"supports CUDA up to {cuda_driver}",
            f"upgrade the NVIDIA driver to one for CUDA {probe.get('cuda_version')}, or install "
            f"a {name} built for CUDA {cuda_driver} or older",
        )
    return Check(
        name,
        "fail",
        f"{name} {version} has CUDA support but sees no GPU",
        f"its CUDA libraries are missing or mismatched: {backends.INSTALL_HINT[backend]}; "
        "run the probe by hand for its log: python -m gpuscout.child.probe " + name,
    )
