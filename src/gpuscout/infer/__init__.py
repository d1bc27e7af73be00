"""`gpuscout bench --mode inference`: plan inference runs (one child per workload, format and
LiteRT variant, every batch size in it), and turn the child's result into one record per batch
size, stored like every run (compare and report read them; `mode` is "inference").

Measuring is in child/inference.py and child/formats.py (the child); this module validates
and runs; analysis/derive.py makes the records.
"""

from gpuscout.infer.inference_plan import (
    DEFAULT_BATCH_SIZES,
    MAX_LOAD_S,
    InferenceResult,
    InferOptions,
    check_format,
    parse_batch_sizes,
    plan,
    run,
    target_verdicts,
)

__all__ = [
    "check_format",
    "DEFAULT_BATCH_SIZES",
    "InferenceResult",
    "InferOptions",
    "MAX_LOAD_S",
    "parse_batch_sizes",
    "plan",
    "run",
    "target_verdicts",
]
