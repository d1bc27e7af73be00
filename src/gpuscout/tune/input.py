"""Is training input-bound? The pipeline alone, the model alone, and both together."""

from __future__ import annotations

import math

from gpuscout.core.spec import DataMode, Precision
from gpuscout.record.run import RunRecord
from gpuscout.tune.ablation import throughput
from gpuscout.tune.session import Session
from gpuscout.tune.workload_results import InputAnalysis, PipelineAlone

# The TensorFlow profiler's input-pipeline analyser bands (share of step time waiting for input).
INPUT_BOUND = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))


def classify_wait(share: float | None) -> str | None:
    if share is None:
        return None
    return next(label for limit, label in INPUT_BOUND if share < limit)


def input_analysis(
    session: Session,
    precision: Precision,
    use_xla: bool,
    ablation_runs: dict[str, RunRecord | None],
    user_pipeline: PipelineAlone | None,
) -> InputAnalysis:
    model_alone = ablation_runs.get("synthetic")
    both = ablation_runs.get("pipeline")
    if precision is not Precision.fp32 or model_alone is None:
        model_alone = session.run(
            "model alone (synthetic)", "input", precision=precision, xla=use_xla, data=DataMode.synthetic
        )
    if user_pipeline is not None:
        alone = user_pipeline
        model_rate = throughput(model_alone)
        if not alone or alone.status != "ok" or not model_rate:
            return InputAnalysis(pipeline=alone, model_samples_per_s=model_rate, verdict=None)
        wait = max(0.0, 1 - alone.samples_per_s / model_rate)
        return InputAnalysis(
            pipeline=alone,
            model_samples_per_s=model_rate,
            predicted_wait_share=wait,
            starves=alone.samples_per_s < model_rate,
            verdict=classify_wait(wait),
            headroom=alone.samples_per_s / model_rate,
        )
    one_core = session.pipeline_alone("pipeline alone, one thread", data=DataMode.naive)
    tuned = session.pipeline_alone("pipeline alone, tuned", data=DataMode.pipeline)
    if precision is not Precision.fp32 or both is None:
        both = session.run("model + tuned pipeline", "input", precision=precision, xla=use_xla, data=DataMode.pipeline)
    model_rate = throughput(model_alone)
    share = both.input_wait_share if both else None
    per_core = one_core.samples_per_s if one_core and one_core.status == "ok" else None
    return InputAnalysis(
        pipeline_one_thread=one_core,
        pipeline_tuned=tuned,
        model_samples_per_s=model_rate,
        together_samples_per_s=throughput(both),
        together_run=both.id if both else None,
        input_wait_share=share,
        verdict=classify_wait(share),
        cores_needed=math.ceil(model_rate / per_core) if model_rate and per_core else None,
    )
