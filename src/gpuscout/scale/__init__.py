"""`gpuscout scale`: how training speeds up over the GPUs of this host.

For each GPU count one ordinary benchmark run (a child, the measurement protocol, telemetry of
every GPU it uses, stored with a `scale` tag), all through the same data-parallel code path,
the one-GPU point included: tf.distribute.MirroredStrategy (NCCL all-reduce) on tensorflow,
keras.distribution.DataParallel on jax. With `local_workers`, each count N instead runs N worker
processes of MultiWorkerMirroredStrategy on this host (cluster.py), the code path of a
multi-host run. Then speedup, efficiency and the time outside compute against the one-GPU
point, the interconnect NVML reports, and a verdict with the likely cause (analysis/scaling.py).

Weak scaling (the default) keeps the per-GPU batch and grows the global batch with the GPUs;
strong scaling keeps the global batch and splits it.
"""

from gpuscout.scale.counts import (
    DEFAULT_TIMEOUT_S,
    MODES,
    Plan,
    ScaleOptions,
    plan,
)
from gpuscout.scale.efficiency import analyse, interconnect, verdict
from gpuscout.scale.measuring import merge, run_scale, run_worker
from gpuscout.scale.results import Point, ScaleReport

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MODES",
    "Plan",
    "Point",
    "ScaleReport",
    "ScaleOptions",
    "analyse",
    "interconnect",
    "merge",
    "plan",
    "run_scale",
    "run_worker",
    "verdict",
]
