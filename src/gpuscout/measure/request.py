"""What every verb that runs the standard workloads is asked about a run (bench, scale, tune
--workload, a sweep's workload trials), and the one place it is checked and made into a spec's
common fields: rules.py's rules, applied once for all of them (issue 61: scale's plan had
repeated bench's nine planning calls, and never checked --data).

A verb's options extend `RunRequest` with what only it has (bench: repeats, a user's model;
scale: counts, mode, the GPUs); its planner calls `checked()` before anything else, then
`spec_fields()` for what each spec it builds shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout.core.errors import UsageError
from gpuscout.core.spec import PROTOCOL, Backend, DataMode, Distribution, Precision, Protocol
from gpuscout.measure import engine, rules


@dataclass
class RunRequest:
    backend: str = "auto"
    precision: str = "fp32"
    xla: bool | None = None  # None: what the backend does (rules.xla)
    # None: the workload's default; "auto" (bench): scaled to the GPU's memory (sizing.auto_batch_size)
    batch_size: int | str | None = None
    seq_len: int | None = None  # token workloads; None: the workload's default
    data: str = "synthetic"
    seed: int = 0
    fit_check: bool = True  # refuse runs whose memory estimate is clearly over (workloads/sizing.py)
    protocol: Protocol = PROTOCOL
    measure: engine.MeasureOptions = field(default_factory=engine.MeasureOptions)


@dataclass(frozen=True)
class Checked:
    """A request's checked parts that do not depend on the device."""

    backend: Backend
    data: DataMode


def checked(request: RunRequest) -> Checked:
    """The checks every planner makes first (exit 2 on bad input, nothing run)."""
    rules.above_zero("--timeout", request.measure.timeout_s, " seconds")
    if isinstance(request.batch_size, int):
        rules.at_least("--batch-size", request.batch_size, 1)
    try:
        data = DataMode(request.data)
    except ValueError:
        raise UsageError(f"unknown --data {request.data!r}: choose synthetic, pipeline or naive") from None
    request.measure.pricing.check()
    return Checked(rules.backend(request.backend), data)


def spec_fields(
    request: RunRequest, ready: Checked, precision_: Precision, distribution: Distribution, on_gpu: bool
) -> dict:
    """What every spec of the request holds, for build_spec: the backend, precision, XLA as the
    backend does it under `distribution` unless asked, the data, the protocol and the seed. The
    workload, its sequence length, the batch, the devices and the task are the verb's."""
    return dict(
        backend=ready.backend,
        precision=precision_,
        xla=rules.xla(ready.backend, request.xla, distribution, on_gpu=on_gpu),
        data=ready.data,
        **request.protocol.model_dump(),
        seed=request.seed,
    )
