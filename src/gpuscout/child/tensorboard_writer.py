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

from gpuscout.core.errors import UsageError
from gpuscout.core.outputs import FOLDER_MARK, check_marked_folder


def main(argv: list[str]) -> int:
    payload = json.loads(Path(argv[0]).read_text())
    final = Path(argv[1])
    logdir = final.with_name(final.name + ".writing")
    try:  # only folders of gpuscout's own are removed (core/outputs/): never a link or the user's
        for folder in (logdir, final):
            check_marked_folder(folder, "the sweep's TensorBoard logs")
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir()
    (logdir / FOLDER_MARK).write_text("TensorBoard logs gpuscout writes whole for its sweep; it replaces this folder\n")
    # tensorboardX writes TensorBoard's event files and its HParams plugin's summaries without
    # TensorFlow (the lent GPU hosts and many jax installs have none)
    from tensorboardX import SummaryWriter
    from tensorboardX.summary import hparams

    metric = payload["metric"]
    for r in payload["results"]:
        writer = SummaryWriter(str(logdir / f"trial-{r['index']:04d}"))
        for step, entry in enumerate(r.get("history") or [], start=1):
            for name, value in entry.items():
                if name not in ("time", "step", "epoch") and isinstance(value, (int, float)):
                    writer.add_scalar(name, value, int(entry.get("step", entry.get("epoch", step))))
        final_value = r.get("metrics", {}).get(metric)
        if isinstance(final_value, (int, float)):
            writer.add_scalar(f"final/{metric}", final_value, 0)
        params = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in r["params"].items()}
        params["status"] = r.get("status", "ok")  # pruned trials told apart in the HParams table
        for summary in hparams(
            params, {f"final/{metric}": final_value if isinstance(final_value, (int, float)) else float("nan")}
        ):
            writer.file_writer.add_summary(summary)
        writer.close()
    shutil.rmtree(final, ignore_errors=True)
    logdir.rename(final)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
