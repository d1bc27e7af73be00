"""`gpuscout tune`: what each optimisation buys on this GPU, the largest batch that fits, and
whether training is input-bound. Every measurement is an ordinary benchmark run (a child per
run, stored with a `tune` tag); this module decides which runs to make and what they say.

Ablation, one factor at a time. Input against the baseline (fp32, XLA off where the backend
allows it, the naive one-thread input pipeline): the tuned tf.data pipeline, and synthetic
device-resident data (the ceiling no pipeline beats). Precision and XLA against the model alone
(fp32 on synthetic data): measured behind a slow pipeline they would show the pipeline, not
themselves (on an H200 a naive ResNet-50 pipeline held every precision at ~550 img/s). Then the
best of each together, against the baseline.
Speedups carry a bootstrap 95% interval (analysis/compare.py) and the loss after a fixed number
of steps is compared with the baseline's, so that a precision that breaks training is caught.

Largest batch: probes (fresh children, a short protocol) doubling from the default batch until
one runs out of memory, then a bisection to a multiple of 8; then throughput at fractions of it
and the knee (the smallest batch within KNEE_SHARE of the best throughput).

Input-bound: the pipeline alone (one thread, and tuned), the model alone (synthetic) and both
together; the share of step time spent waiting for input is classified as the TensorFlow
profiler's input-pipeline analyser does (< 5% not, 5-20% moderately, > 20% highly input-bound).
"""

from gpuscout.tune.workload_tune import (
    PARTS,
    TUNE_PROTOCOL,
    TuneOptions,
    plan,
    tune,
)

__all__ = [
    "PARTS",
    "plan",
    "tune",
    "TUNE_PROTOCOL",
    "TuneOptions",
]
