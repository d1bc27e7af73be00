"""`gpuscout recommend`: rank the catalog's GPUs for one training (or serving) job.

For each GPU: does the job fit (weights, gradients, optimizer state and activations per GPU,
from gpuscout's measured memory model where one exists, else estimated, with its basis); its
throughput (measured on that GPU kind in the user's store, else predicted by gpuscout.catalog.predict
from the measurements and published figures it has); the time and cost to train; throughput per
dollar; and one line of reasons. docs/catalog.md has the equations.
"""

from __future__ import annotations

from gpuscout.recommend.jobs import (
    Job,
    for_inference,
    gpt_shape,
    job_for_model,
    job_for_params,
    job_for_workload,
    params_label,
    parse_count,
    parse_duration_h,
    stored_references,
)
from gpuscout.recommend.ranking import Constraints, Row, candidates, evaluate, rank

__all__ = [
    "Constraints",
    "Job",
    "Row",
    "candidates",
    "evaluate",
    "for_inference",
    "gpt_shape",
    "job_for_model",
    "job_for_params",
    "job_for_workload",
    "params_label",
    "parse_count",
    "parse_duration_h",
    "rank",
    "stored_references",
]
