"""What `gpuscout tune --workload` hands its report and its JSON: typed, each part with declared
fields (issue 61: pytest-benchmark derives every figure from one declared field list).

The JSON is what the dicts these replaced wrote, key for key: `as_json` leaves out only the
fields a part never set (a user's pipeline and the standard one's input analysis share one type,
each with its own keys; a batch search that found nothing has no curve's knee or cap)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Speedup(BaseModel):
    """samples/s against a reference run's, with the 95% interval of the ratio where it has one."""

    ratio: float
    ci95_low: float | None = None
    ci95_high: float | None = None


class LossChange(BaseModel):
    """The fixed-step loss against the reference's, for runs fed the same data."""

    baseline: float
    value: float
    steps: int | None = None
    relative: float
    changed: bool  # not finite, or more than ablation.LOSS_CHANGE_LIMIT apart


class AblationRow(BaseModel):
    label: str
    factor: str | None = None  # input | precision | xla | combined (None: the baseline)
    versus: str  # what it is held against
    run_id: str | None = None
    status: str
    precision: str | None = None
    xla: bool | None = None
    data: str | None = None
    samples_per_s: float | None = None
    throughput: dict | None = None  # the run's window statistics (record.run.Throughput's fields)
    speedup: Speedup | None = None
    loss: LossChange | None = None
    input_wait_share: float | None = None
    flags: list[str] = Field(default_factory=list)


class BestSetting(BaseModel):
    precision: str
    xla: bool


class Ablation(BaseModel):
    baseline_run: str | None = None
    rows: list[AblationRow] = Field(default_factory=list)
    best: BestSetting
    note: str | None = None


class BatchProbe(BaseModel):
    batch_size: int
    status: str
    run_id: str
    peak_memory_bytes: int | None = None
    message: str | None = None


class BatchPoint(BaseModel):
    batch_size: int
    run_id: str
    status: str
    samples_per_s: float | None = None
    throughput: dict | None = None
    peak_memory_bytes: int | None = None


class BatchSearch(BaseModel):
    largest: int | None = None  # the largest batch that fit (None: not even the smallest tried)
    first_oom: int | None = None
    limited_by: str  # memory | cap | budget
    cap: int | None = None
    probes: list[BatchProbe] = Field(default_factory=list)
    curve: list[BatchPoint] = Field(default_factory=list)
    knee: int | None = None  # the smallest batch within batch.KNEE_SHARE of the fastest
    default: int | None = None


class PipelineAlone(BaseModel):
    """The input pipeline without the model, on the CPU (tune.session.Session.pipeline_alone)."""

    label: str
    status: str
    message: str | None = None
    source: str | None = None
    samples_per_s: float | None = None
    windows_samples_per_s: list[float] | None = None


class InputAnalysis(BaseModel):
    """Is training input-bound? A user's pipeline (`pipeline`, `predicted_wait_share`, `starves`,
    `headroom`) or the workload's own (`pipeline_one_thread`, `pipeline_tuned`, `together_*`,
    `input_wait_share`, `cores_needed`), the model alone either way."""

    pipeline: PipelineAlone | None = None
    model_samples_per_s: float | None = None
    predicted_wait_share: float | None = None
    starves: bool | None = None
    headroom: float | None = None
    pipeline_one_thread: PipelineAlone | None = None
    pipeline_tuned: PipelineAlone | None = None
    together_samples_per_s: float | None = None
    together_run: str | None = None
    input_wait_share: float | None = None
    verdict: str | None = None  # input.INPUT_BOUND's band
    cores_needed: int | None = None

    @property
    def of_user_pipeline(self) -> bool:
        return "pipeline" in self.model_fields_set


class Recommendation(BaseModel):
    title: str
    gain: Speedup | None = None  # None: advice with no speed-up measured (memory growth)
    code: str
    cost: str


class WorkloadTuneReport(BaseModel):
    session: str
    created_utc: str
    workload: str
    backend: str
    device: str
    gpu: str | None = None
    default_batch_size: int | None = None
    budget_s: float
    notes: list[str] = Field(default_factory=list)
    ablation: Ablation | None = None
    batch: BatchSearch | None = None
    input: InputAnalysis | None = None
    recommendations: list[Recommendation] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    elapsed_s: float = 0.0

    def as_json(self) -> dict:
        return self.model_dump(mode="json", exclude_unset=True)
