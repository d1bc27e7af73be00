"""One function per kind of fix: (facts the pattern captured, the machine, the run) -> what to
do on *this* machine. Install commands are the framework's CUDA extra, which brings matching CUDA
libraries into the environment (TensorFlow's install guide: `tensorflow[and-cuda]`; jax's:
`jax[cuda12]` / `jax[cuda13]`), never a system-wide CUDA install."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuscout.explain import script_remedies
from gpuscout.explain.machine import Context, Framework, Machine
from gpuscout.explain.memory_remedies import out_of_memory

# Which pip package holds each CUDA library (NVIDIA's wheels on the package index), {cu}: cu12, cu13
LIBRARY_PACKAGES = {
    "libcudnn": "nvidia-cudnn-{cu}",
    "libcudart": "nvidia-cuda-runtime-{cu}",
    "libcublas": "nvidia-cublas-{cu}",
    "libcufft": "nvidia-cufft-{cu}",
    "libcurand": "nvidia-curand-{cu}",
    "libcusolver": "nvidia-cusolver-{cu}",
    "libcusparse": "nvidia-cusparse-{cu}",
    "libnccl": "nvidia-nccl-{cu}",
    "libnvrtc": "nvidia-cuda-nvrtc-{cu}",
    "libcupti": "nvidia-cuda-cupti-{cu}",
}


def _major(version: str | None) -> int | None:
    match = re.match(r"(\d+)", str(version or ""))
    return int(match.group(1)) if match else None


def _framework(machine: Machine, name: str | None) -> Framework | None:
    return machine.frameworks.get(name) if name else None


def _framework_cuda_major(machine: Machine, name: str | None) -> int | None:
    """The major CUDA version the framework was built for (TensorFlow) or loaded (jax)."""
    framework = _framework(machine, name)
    return _major(framework.cuda_version) if framework else None


def install_command(name: str | None, machine: Machine) -> str:
    """The framework's own CUDA extra, pinned to the installed version when known; both when the
    log does not say which framework wrote it and both are installed."""
    if name is None and len(machine.frameworks) > 1:
        return " or ".join(f"{install_command(n, machine)} ({n})" for n in sorted(machine.frameworks, reverse=True))
    name = name or next(iter(machine.frameworks), None)
    framework = _framework(machine, name)
    version = f"=={framework.version}" if framework and framework.version else ""
    if name == "tensorflow":
        return f'pip install "tensorflow[and-cuda]{version}"'
    cuda = _framework_cuda_major(machine, name) or _driver_cuda_major(machine) or 12
    return f'pip install -U "jax[cuda{cuda}]{version}"'


def _driver_cuda_major(machine: Machine) -> int | None:
    major = _major(machine.cuda_driver_version)
    return min(major, 13) if major else None


def _named(name: str | None, machine: Machine) -> str:
    framework = _framework(machine, name)
    if framework is None:
        return name or "the framework"
    built = ", ".join(
        p
        for p in (
            f"CUDA {framework.cuda_version}" if framework.cuda_version else "",
            f"cuDNN {framework.cudnn_version}" if framework.cudnn_version else "",
        )
        if p
    )
    return f"{name} {framework.version or ''}".strip() + (f" ({built})" if built else "")


def missing_library(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    library = facts.get("library", "")
    if library.startswith("libcuda.so"):
        return (
            "libcuda.so is the NVIDIA driver's own library, not a pip package: install the NVIDIA driver "
            "(nvidia-smi must work)"
            + (
                ""
                if machine.driver_version is None
                else f"; NVML sees driver {machine.driver_version}, so check that the "
                "container was started with the GPU (--gpus all)"
            )
        )
    if library.startswith("libnvinfer"):
        return f"{library} is TensorRT, which Keras training does not use: the warning is harmless"
    soname = re.search(r"\.so\.(\d+)", library)
    cu_major = _framework_cuda_major(machine, name)
    if library.startswith("libcudart") and soname:
        cu_major = int(soname.group(1))
    package = next((p for prefix, p in LIBRARY_PACKAGES.items() if library.startswith(prefix)), None)
    where = (
        f"{library} comes with the pip package {package.format(cu=f'cu{cu_major or 12}')}"
        if package
        else f"{library} is a CUDA library"
    )
    advice = (
        f"{where}; install it with {_named(name, machine)}'s CUDA extra: {install_command(name, machine)} "
        "(the matching CUDA libraries go into the environment; no system-wide CUDA install needed)"
    )
    if library.startswith("libcudnn") and soname and soname.group(1) == "8":
        advice += "; a request for cuDNN 8 means a framework built for cuDNN 8 (TensorFlow 2.14 or older)"
    ld = machine.env.get("LD_LIBRARY_PATH")
    if ld:
        advice += f"; LD_LIBRARY_PATH is set ({ld}): libraries there are found before the environment's"
    return advice


def download_by_hand(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    """keras.utils.get_file keeps what it fetched under KERAS_HOME (~/.keras unless set), in
    `datasets/` for keras.datasets and `models/` for keras.applications' weights, and fetches
    nothing when the file is there (keras/src/utils/file_utils.py)."""
    url = facts.get("url")
    home = machine.env.get("KERAS_HOME") or "~/.keras"
    proxy = next(
        (
            f"{k}={re.sub(r'//[^@/]*@', '//***@', machine.env[k])}"  # never a password into a record
            for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
            if machine.env.get(k)
        ),
        None,
    )
    network = (
        f"a proxy is set ({proxy}): check that it lets this address through"
        if proxy
        else "behind a proxy, set HTTPS_PROXY (and HTTP_PROXY) in the script's environment"
    )
    if not url:
        return f"check this machine's network (DNS, a firewall); {network}"
    name_ = url.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
    subdir = "models" if name_.endswith((".h5", ".keras", ".weights.h5")) or "applications" in url else "datasets"
    return (
        f"download {url} on a machine with network and copy it to {home}/{subdir}/{name_}: Keras then uses "
        f"that file and fetches nothing; {network}"
    )


def tensorflow_gpu_libraries(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        f"install the CUDA libraries {_named('tensorflow', machine)} was built for: "
        f"{install_command('tensorflow', machine)}; the missing ones are named in the lines before"
    )


def cudnn_mismatch(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    paths = [p for f in machine.frameworks.values() if name in (None, f.name) for p in f.cudnn_paths]
    found = f" (cuDNN found at {', '.join(dict.fromkeys(paths))})" if paths else ""
    advice = (
        f"{_named(name, machine)} needs cuDNN {facts.get('built')} or a newer {_major(facts.get('built'))}.x; "
        f"{facts.get('loaded')} was loaded{found}. Install the matching one with the framework's CUDA extra: "
        f"{install_command(name, machine)}"
    )
    ld = machine.env.get("LD_LIBRARY_PATH")
    if ld:
        advice += (
            f", and take the older cuDNN off LD_LIBRARY_PATH ({ld}): a system or conda cuDNN there is "
            "loaded before the environment's"
        )
    else:
        advice += "; an older system or conda cuDNN loaded first is the usual cause: check `ldconfig -p | grep cudnn`"
    return advice


def dnn_unavailable(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        "this is the echo of an earlier failure; without one in the log, cuDNN usually could not get GPU memory: "
        "let the framework grow its memory (TF_FORCE_GPU_ALLOW_GROWTH=true; jax: "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false) and check what else holds the GPU (nvidia-smi)"
    )


def driver_too_old(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    framework = _framework(machine, name)
    needs = framework.cuda_version if framework and framework.cuda_version else None
    if machine.driver_version is None:
        return "NVML finds no NVIDIA driver here: install the driver (nvidia-smi must work), then run gpuscout doctor"
    have = f"driver {machine.driver_version} supports CUDA up to {machine.cuda_driver_version}"
    if needs:
        have += f", {_named(name, machine)} needs CUDA {needs}"
    older = _driver_cuda_major(machine)
    other = (
        f'pip install -U "jax[cuda{older}]"'
        if name == "jax"
        else f"a tensorflow release built for CUDA {machine.cuda_driver_version} or older (TensorFlow's tested "
        "build configurations list them)"
    )
    return (
        f"{have}: either upgrade the NVIDIA driver to one for CUDA {needs or 'the framework uses'}, or install {other}"
    )


def jax_cpu_only(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    if machine.driver_version is None:
        return "no NVIDIA driver is visible here (NVML): install it first, then " + install_command("jax", machine)
    return (
        f"the driver ({machine.driver_version}) supports CUDA up to {machine.cuda_driver_version}: "
        f"{install_command('jax', machine)}"
    )


def jax_cuda_backend(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    reason = facts.get("reason", "")
    visible = machine.env.get("CUDA_VISIBLE_DEVICES")
    if "No visible GPU devices" in reason and visible is not None:
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides the GPUs from jax: unset it or name a GPU index"
    if re.search(r"driver|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|insufficient", reason, re.IGNORECASE):
        return driver_too_old(facts, machine, context, "jax")
    return (
        f"check the driver ({machine.driver_version or 'none found'}, CUDA up to "
        f"{machine.cuda_driver_version or '?'}) against the plugin: {install_command('jax', machine)}; "
        "`gpuscout doctor` runs jax's probe"
    )


def no_kernel_image(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    gpu = machine.gpus[0] if machine.gpus else None
    if gpu is None or not gpu.compute_capability:
        built = name or "the framework"
        return f"compare the GPU's compute capability (nvidia-smi) with the architectures {built} was built for"
    sm = "sm_" + gpu.compute_capability.replace(".", "")
    framework = _framework(machine, name)
    built = framework.cuda_archs if framework else []
    if built:
        return (
            f"GPU {gpu.index} ({gpu.name}) is compute capability {gpu.compute_capability} ({sm}); "
            f"{_named(name, machine)} was built for {', '.join(built)}: install a build that includes {sm} "
            f"(a newer release: {install_command(name, machine)}) or build it from source for {sm}"
        )
    return (
        f"GPU {gpu.index} ({gpu.name}) is compute capability {gpu.compute_capability} ({sm}); "
        f"{_named(name, machine)} does not report the architectures it was built for: install the newest "
        f"release ({install_command(name, machine)}), whose release notes list the supported GPUs"
    )


def ptxas_missing(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    cu = _framework_cuda_major(machine, name) or _driver_cuda_major(machine) or 12
    gpu = machine.gpus[0] if machine.gpus else None
    needs = f" that supports compute capability {gpu.compute_capability}" if gpu and gpu.compute_capability else ""
    return (
        f"install a ptxas{needs} into the environment: pip install -U nvidia-cuda-nvcc-cu{cu} "
        f"(the framework's CUDA extra includes it: {install_command(name, machine)}), or put a CUDA "
        "toolkit's bin/ on PATH, or point XLA at one: XLA_FLAGS=--xla_gpu_cuda_data_dir=/usr/local/cuda"
    )


def nccl_system(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    gpus = f" over {len(machine.gpus)} GPUs" if machine.gpus else ""
    return (
        f"run again with NCCL_DEBUG=INFO to see the call that failed{gpus}; in a container give NCCL shared "
        "memory (docker run --shm-size=1g, or --ipc=host); on one host, NCCL_SOCKET_IFNAME=lo when it picks "
        "a network interface it cannot use; NCCL_P2P_DISABLE=1 tells whether peer-to-peer is the problem"
    )


def nccl_cuda(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    return (
        "the CUDA error is the cause: look for an out-of-memory or driver message before this one; "
        "nvidia-smi shows whether a GPU is lost (Xid errors in dmesg); NCCL_DEBUG=WARN names the failed call"
    )


def xla_flag_unknown(facts: dict, machine: Machine, context: Context, name: str | None) -> str:
    # (Not the rest of XLA_FLAGS spelled out: in a gpuscout run the child's holds gpuscout's own flags too.)
    jax = _framework(machine, "jax")
    here = f" (jax {jax.version} here)" if jax and jax.version else ""
    return (
        f"take {facts.get('flags', 'it')} out of XLA_FLAGS; XLA's flags come and go between releases{here}: a "
        "flag from a guide for another version, for TPUs (LIBTPU_INIT_ARGS) or for TensorFlow's auto-clustering "
        "(TF_XLA_FLAGS) is refused"
    )


FIXERS: dict[str, Callable[[dict, Machine, Context, str | None], str]] = {
    f.__name__: f
    for f in (
        missing_library,
        tensorflow_gpu_libraries,
        cudnn_mismatch,
        dnn_unavailable,
        driver_too_old,
        jax_cpu_only,
        jax_cuda_backend,
        out_of_memory,
        no_kernel_image,
        ptxas_missing,
        nccl_system,
        nccl_cuda,
        download_by_hand,
        xla_flag_unknown,
        *script_remedies.FIXERS,  # the script's own mistakes (issue 78)
    )
}
