"""The README's first command on a GPU (jax backend), for docs/benchmarks.md (issue 78, item 4: the
example must show its diagnosis on a CPU as on a GPU), in one call:

1. `gpuscout watch --steps 200 -- python examples/watch_me.py`, twice: the verdict, the input
   wait share, the step time;
2. `gpuscout tune --budget-minutes M -- python examples/watch_me.py`: whether tune reaches the
   fix the verdict names (the generator's work in workers) and what it buys by the script's clock;
3. the quickstart's benchmark, `gpuscout bench resnet50 --precision mixed_bfloat16`.

    python benchmarks/quickstart_on_gpu.py --out OUTDIR [--budget-minutes 4]

Writes each command's output under OUTDIR and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from watch_on_gpu import run  # beside it: each command's output saved, its time said

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "watch_me.py"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-minutes", default="4")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store.sqlite"
    env = dict(os.environ, KERAS_BACKEND="jax", COLUMNS="")
    gpuscout = [sys.executable, "-m", "gpuscout"]
    rows = []
    for i in (1, 2):
        proc = run(
            f"watch{i}",
            [*gpuscout, "watch", "--steps", "200", "--json", "--store", str(store), "--", sys.executable, str(EXAMPLE)],
            env,
            out,
        )
        try:
            record = json.loads(proc.stdout)["runs"][0]
        except (json.JSONDecodeError, KeyError, IndexError):
            rows.append((f"watch {i}", "no JSON", "", ""))
            continue
        first = (record.get("verdict") or [{}])[0]
        rows.append(
            (
                f"watch {i}",
                f"{(record.get('input_wait_share') or 0):.1%} input wait",
                f"step {1000 * (record.get('step_time_s') or 0):.2f} ms",
                f"{first.get('code', '-')}: {first.get('message', '')[:70]}",
            )
        )
    tuned = run(
        "tune",
        [*gpuscout, "tune", "--budget-minutes", args.budget_minutes, "--store", str(store), "--", sys.executable,
         str(EXAMPLE)],
        env,
        out,
    )  # fmt: skip
    # the session's summary line: what it kept (confirmed between runs after the search) and its figure
    said = ("baseline ->", "nothing kept", "no change was faster")
    summary = next((line for line in tuned.stdout.splitlines() if line.startswith(said)), "")
    rows.append(("tune", f"exit {tuned.returncode}", "", summary[:300]))
    bench = run(
        "bench", [*gpuscout, "bench", "resnet50", "--precision", "mixed_bfloat16", "--store", str(store)], env, out
    )
    rows.append(
        (
            "bench resnet50",
            f"exit {bench.returncode}",
            "",
            bench.stdout.strip().splitlines()[-1][:120] if bench.stdout.strip() else "",
        )
    )
    print()
    for row in rows:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
