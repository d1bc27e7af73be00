#!/usr/bin/env python3
"""Install gpuscout into ./.venv, watch an example training and say why it is slow, then run a
quick benchmark, on this machine's GPU or its CPU.

Needs only Python 3.10+. With an NVIDIA driver (nvidia-smi works) it installs the `gpu` extra
(TensorFlow with its CUDA libraries); without one, the CPU build of TensorFlow. Then:
`gpuscout doctor`; `gpuscout watch --steps 200 -- python examples/watch_me.py` (a small CNN fed
by a PyDataset that augments in Python: the verdict and what to change); a benchmark of ResNet-50
in mixed bfloat16 (mixed float16 before Ampere), or on a CPU a short ResNet-18/CIFAR run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def compute_capability() -> float:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.split()
    try:
        return float(out[0])
    except (IndexError, ValueError):
        return 0.0


def main() -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 (this file runs under any python3, to say so)
        sys.exit("gpuscout needs Python 3.10 or newer")
    if not (VENV / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    python = str(VENV / "bin" / "python")
    gpu = has_gpu()
    extra = "gpu" if gpu else "tensorflow"
    print(f"installing gpuscout[{extra}] into {VENV} ...", flush=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extra}]"], check=True)
    gpuscout = str(VENV / "bin" / "gpuscout")
    subprocess.run([gpuscout, "doctor"])
    # a verdict on a training of the kind users write, before any benchmark
    subprocess.run([gpuscout, "watch", "--steps", "200", "--", python, str(ROOT / "examples" / "watch_me.py")])
    if gpu:
        precision = "mixed_bfloat16" if compute_capability() >= 8.0 else "mixed_float16"
        args = ["resnet50", "--precision", precision]
    else:
        args = [
            "resnet18_cifar",
            "--cpu",
            "--batch-size",
            "64",
            "--warmup-steps",
            "3",
            "--windows",
            "3",
            "--window-steps",
            "3",
            "--window-seconds",
            "3",
        ]
    return subprocess.run([gpuscout, "bench", *args]).returncode


if __name__ == "__main__":
    sys.exit(main())
