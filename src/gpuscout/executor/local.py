"""Local executor: one measuring child per run (started by executor/process.py), and how it ended.

Why a child per run (DESIGN.md): Keras fixes its backend at import, each run gets clean GPU
memory, and an out-of-memory crash or a hang cannot take the parent down.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from gpuscout.core import backends
from gpuscout.core.failures import classify_failure
from gpuscout.core.spec import Backend, RunSpec
from gpuscout.executor import process, scratch
from gpuscout.record.child import ChildOutcome, ChildResult

STDERR_TAIL_CHARS = 4000
# Test and debugging knob: a command to run instead of the real worker (the spec path is appended).
WORKER_ENV = "GPUSCOUT_WORKER"
# XLA runs an all-reduce of up to a few MB as its own one-shot Triton kernel, which nothing overlaps:
# ResNet-50's step ran 27 of them on two H100s. Off, NCCL takes them asynchronously like the rest:
# bf16 ResNet-50 scaled 96.5% instead of 95.6% (10,627 against 10,482 img/s, one call, 2026-11-25;
# docs/benchmarks.md, "Small all-reduces to NCCL"). The user's own setting of it wins. (The
# latency-hiding scheduler NVIDIA's JAX containers turn on added nothing there, and cost 2% on two
# H200s on 2026-11-23.) XLA exits at start-up on a flag it does not know, so it is set only where
# jaxlib has it: since 0.6.0 (the name is in 0.6.0's libraries and not in 0.5.3's; jax 0.6.0 on the
# CPU starts with it: checked 2026-11-25). A CPU test starts the installed jax with it, so a jax that
# drops it fails there first.
NO_ONE_SHOT_ALL_REDUCE = "--xla_gpu_unsupported_use_all_reduce_one_shot_kernel=false"
ONE_SHOT_FLAG_SINCE_JAXLIB = (0, 6)


def child_env(spec: RunSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a run's child starts with, set before any framework import."""
    env = dict(os.environ if base is None else base)
    env["KERAS_BACKEND"] = spec.backend.value
    env["PYTHONUNBUFFERED"] = "1"
    # NVML numbers GPUs by PCI bus id; make CUDA agree, so --gpu N is the same GPU in both.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if spec.gpu_index is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
        if spec.backend is Backend.jax:
            env["JAX_PLATFORMS"] = "cpu"
            if spec.devices > 1:  # jax's only way to several CPU devices; set before jax starts
                flag = f"--xla_force_host_platform_device_count={spec.devices}"
                env["XLA_FLAGS"] = " ".join(f for f in (env.get("XLA_FLAGS"), flag) if f)
                # Each logical device's all-reduce holds a thread of XLA's CPU pool while it waits
                # for the others, and that pool has one thread per core (DefaultThreadPoolSize in
                # XLA's cpu client, which reads NPROC): on 2 cores two devices deadlocked in the
                # rendezvous 6 times in 6 on 2026-11-22, and 0 in 3 with NPROC=8.
                env.setdefault("NPROC", str((os.cpu_count() or 1) + 2 * spec.devices))
        # (tensorflow splits the CPU into logical devices in the child: backends/tensorflow_steps.py)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpus)
        user_flags = env.get("XLA_FLAGS", "")
        # the child runs this Python, so its jaxlib is the one installed here (importing jax would start it)
        jaxlib_has_flag = (backends.installed_release("jaxlib") or ()) >= ONE_SHOT_FLAG_SINCE_JAXLIB
        if (
            spec.backend is Backend.jax
            and spec.devices > 1
            and jaxlib_has_flag
            and NO_ONE_SHOT_ALL_REDUCE.split("=")[0] not in user_flags
        ):
            env["XLA_FLAGS"] = " ".join(f for f in (user_flags, NO_ONE_SHOT_ALL_REDUCE) if f)
    # TensorFlow otherwise maps all memory of every visible GPU at start-up.
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    # JAX otherwise preallocates 75% of the GPU, and NVML's memory figure then says nothing.
    # Turning it off cost nothing measurable (ResNet-50 bf16 on an H200: 6,617 img/s off vs
    # 6,614-6,620 on; docs/benchmarks.md), and the allocator's peak is read either way.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # The child must import this very gpuscout, also when it runs from a source tree.
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def worker_command() -> list[str]:
    override = os.environ.get(WORKER_ENV)
    if override:
        return shlex.split(override)
    return [sys.executable, "-m", "gpuscout.child.worker"]


def run_child(
    spec: RunSpec,
    *,
    timeout_s: float,
    on_event: Callable[[dict], None] = lambda event: None,
    env: dict[str, str] | None = None,
    on_start: Callable[[int], None] = lambda pid: None,
    cancel: threading.Event | None = None,
) -> ChildOutcome:
    """Run one measurement in a child process and classify how it ended. Setting `cancel`
    stops it (a worker of a multi-worker run whose peer failed would otherwise wait forever)."""
    with scratch.folder("run") as tmp:
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(spec.model_dump_json(), encoding="utf-8")
        log_path = Path(tmp, "output.txt")  # the child's stdout and stderr: its tail is kept
        with open(log_path, "wb") as log:
            finished = process.run(
                [*worker_command(), str(spec_path)],
                env=env if env is not None else child_env(spec),
                timeout_s=timeout_s,
                stdout=log,
                stderr=log,
                on_event=on_event,
                on_start=on_start,
                cancel=cancel,
                last_events=("result", "error"),
            )
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-STDERR_TAIL_CHARS:]
    if finished.cancelled:
        return ChildOutcome(
            "failed",
            None,
            "stopped: another process of the same run failed",
            tail,
            finished.returncode,
            finished.duration_s,
            finished.events,
        )
    return _classify(
        finished.events,
        finished.returncode,
        finished.timed_out,
        timeout_s,
        tail,
        finished.duration_s,
        finished.lingered,
    )


def _phase(events: list[dict]) -> str:
    """Where a run was when its time ran out, and what to change: said from its events."""
    kinds = [e.get("event") for e in events]
    windows = sum(k == "window" for k in kinds)
    if "compiled" not in kinds:
        return (
            "while building and compiling the first step (a smaller --batch-size compiles faster; "
            "--timeout SECONDS waits longer)"
        )
    if "warmed_up" not in kinds:
        return "during warm-up (fewer --warmup-steps, or --timeout SECONDS)"
    return (
        f"while measuring, after {windows} window(s) (fewer --windows or a shorter --window-seconds, "
        "or --timeout SECONDS)"
    )


def _classify(events, returncode, timed_out, timeout_s, tail, duration, lingered) -> ChildOutcome:
    """`lingered`: the child sent its result or error, then did not exit and was stopped (what it
    sent stands: the measurement was complete)."""
    result = next((e for e in events if e.get("event") == "result"), None)
    error = next((e for e in events if e.get("event") == "error"), None)
    if timed_out:
        return ChildOutcome(
            "timeout",
            None,
            f"exceeded the {timeout_s:g} s timeout {_phase(events)} and was killed",
            tail,
            returncode,
            duration,
            events,
        )
    if result is not None and (returncode == 0 or lingered):
        try:
            return ChildOutcome(
                "ok", ChildResult.model_validate(result.get("result")), None, tail, returncode, duration, events
            )
        except ValidationError as exc:  # a worker of another gpuscout version, or a bug: never stored as ok
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "result"
            return ChildOutcome(
                "failed",
                None,
                f"the worker's result did not validate ({where}: {problem['msg']})",
                tail,
                returncode,
                duration,
                events,
            )
    if error is not None:
        return ChildOutcome(error.get("kind", "failed"), None, error.get("message"), tail, returncode, duration, events)
    status = classify_failure(tail)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        message = f"the worker was killed by {name}"
        if -returncode == signal.SIGKILL and status != "oom":
            message += " (often the host's out-of-memory killer)"
    else:
        message = f"the worker exited with code {returncode} without a result"
    return ChildOutcome(status, None, message, tail, returncode, duration, events)
