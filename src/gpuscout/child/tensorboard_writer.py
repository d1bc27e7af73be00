"""Child process: write a sweep's TensorBoard logs (one run per trial: its reported scalars by
step, and the HParams plugin's table of parameters and the metric). The logs are written whole
beside LOGDIR and then put in its place: a resumed sweep's TensorBoard shows each trial once,
and a writer killed half-way leaves the previous logs as they were.

    python -m gpuscout.child.tensorboard_writer INPUT.json LOGDIR
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    payload = json.loads(Path(argv[0]).read_text())
    final = Path(argv[1])
    logdir = final.with_name(final.name + ".writing")
    shutil.rmtree(logdir, ignore_errors=True)
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    metric = payload["metric"]
    results = payload["results"]
    with tf.summary.create_file_writer(str(logdir)).as_default():
        hp.hparams_config(hparams=[hp.HParam(name) for name in payload["space"]],
                          metrics=[hp.Metric(metric, display_name=metric)])
    for r in results:
        with tf.summary.create_file_writer(str(logdir / f"trial-{r['index']:04d}")).as_default():
            hp.hparams({k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in r["params"].items()},
                       trial_id=f"trial-{r['index']:04d}")
            for step, entry in enumerate(r.get("history") or [], start=1):
                for name, value in entry.items():
                    if name not in ("time", "step") and isinstance(value, (int, float)):
                        tf.summary.scalar(name, value, step=int(entry.get("step", step)))
            if metric in r.get("metrics", {}):
                tf.summary.scalar(f"final/{metric}", r["metrics"][metric], step=0)
    shutil.rmtree(final, ignore_errors=True)
    logdir.rename(final)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
