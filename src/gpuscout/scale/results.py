"""A `scale` session's result as typed data (issue 61, item 2): every count's point, the verdict and
the session, with declared fields. scale/efficiency.py makes it, report/scale.py prints it, and its
JSON (`--json`, the saved session report) is `as_json()`: the fields in this order, `try` spelled
as the JSON has always spelled it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpuscout.record.run import RunRecord
from gpuscout.telemetry.nvml import Link


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Speedup(Part):
    """Samples/s against the 1-device run's, with the bootstrap 95% CI of the ratio of their windows."""

    ratio: float
    ci95_low: float
    ci95_high: float


class Efficiency(Part):
    """Speedup over devices: 1.0 is linear."""

    value: float
    ci95_low: float
    ci95_high: float


class EachAlone(Part):
    """Efficiency against the slowest of the count's GPUs measured alone (analysis/scaling.against_each_alone)."""

    value: float
    ci95_low: float
    ci95_high: float
    slowest_gpu: int
    slowest_vs_first: float  # the slowest GPU alone against the first alone
    alone_samples_per_s: dict[str, float]  # by GPU index


class Explained(Part):
    """A failed run's known cause and this machine's fix (explain/)."""

    cause: str
    fix: str


class Cause(Part):
    code: str  # analysis/scaling.Cause's
    message: str
    try_: str = Field(alias="try")


class GpuFigures(Part):
    """One GPU's telemetry over the run's windows."""

    index: int | None
    gpu_util_mean_pct: float | None
    power_mean_w: float | None
    sm_clock_mean_mhz: float | None
    temperature_max_c: float | None
    memory_used_max_bytes: int | None


class Point(Part):
    """One count of devices: its run and what it means against the 1-device run."""

    devices: int
    run_id: str
    status: str
    message: str | None  # a failed run's error
    explained: Explained | None
    batch_size: int  # global
    per_device_batch_size: int
    samples_per_s: float | None
    ci95: list[float] | None  # samples/s
    step_time_s: float | None
    expected_efficiency: float  # what this many devices over this link should reach
    link: str | None  # NVLink | PCIe | None (not read)
    speedup: Speedup | None = None
    efficiency: Efficiency | None = None
    outside_compute_s: float | None = None  # a step's time beyond the 1-device step's share
    outside_compute_share: float | None = None
    allreduce_estimate_s: float | None = None  # the gradients' all-reduce at the link's peak, a floor
    input_wait_share: float | None
    all_reduce: str | None  # what summed the gradients
    batchnorm: str | None
    communication: str | None  # the exchange's settings, in words
    collectives: str | None  # what the compiled step sent, in words
    per_gpu: list[GpuFigures]
    flags: list[str]
    mfu: float | None
    peak_memory_bytes: int | None
    each_alone: EachAlone | None = None
    causes: list[Cause] = Field(default_factory=list)
    meets_expectation: bool | None = None

    @property
    def judged(self) -> float | None:
        """The efficiency a count is judged by: against each of its GPUs alone where they were
        measured, else against the first GPU alone."""
        if self.each_alone is not None:
            return self.each_alone.value
        return self.efficiency.value if self.efficiency else None


class Interconnect(Part):
    kind: str  # NVLink | PCIe
    detail: str


class Verdict(Part):
    ok: bool
    summary: str
    try_: list[str] = Field(alias="try")  # what to try, first first


class ScaleReport(Part):
    mode: str  # weak | strong
    backend: str
    precision: str
    data: str
    batchnorm: str | None
    device_kind: str  # gpu | cpu
    gpu: str | None
    interconnect: Interconnect | None
    topology: list[Link]
    points: list[Point]
    verdict: Verdict
    # the session's, set once its runs are done (scale/measuring.run_scale)
    session: str | None = None
    workload: str | None = None
    elapsed_s: float | None = None
    notes: list[str] = Field(default_factory=list)
    local_workers: bool = False
    gpu_ids: list[int] = Field(default_factory=list)

    def as_json(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


@dataclass(frozen=True)
class HostCommand:
    host: str
    command: str


@dataclass(frozen=True)
class ClusterPlan:
    """`scale --hosts`' answer: the command each host runs, then how the records come together."""

    cluster: str
    workers: list[HostCommand]
    then: list[str]

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WorkerDone:
    """`scale --worker`'s answer: this host's record, stored under the cluster id."""

    record: RunRecord
    store: Path

    def as_json(self) -> dict:
        return self.record.model_dump(mode="json")


@dataclass(frozen=True)
class Merged:
    """`scale --merge`'s answer: the workers' records as one run."""

    record: RunRecord

    def as_json(self) -> dict:
        return self.record.model_dump(mode="json")
