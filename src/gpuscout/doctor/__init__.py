"""`gpuscout doctor`: is this machine set up to train on its GPUs, and if not, what to do.

Each check is ok / warn / fail with a one-line fix. Backends are probed in child processes
(``gpuscout.child.probe``) in parallel; NVML is asked directly.
"""

from gpuscout.doctor.checks import (
    FAKE_PROBES_ENV,
    PROBE_TIMEOUT_S,
    Check,
    probe_backend,
    run_doctor,
    tensor_core_paths,
)
from gpuscout.doctor.results import DoctorResult, Explained

__all__ = [
    "Check",
    "DoctorResult",
    "Explained",
    "FAKE_PROBES_ENV",
    "probe_backend",
    "PROBE_TIMEOUT_S",
    "run_doctor",
    "tensor_core_paths",
]
