"""Issue 45 on a lent GPU: tune's best result on input-bound user scripts against the best fix made
by hand, and the patched copy against the injected changes, in one call.

For each mode of benchmarks/user_input/text_classifier.py: the script and its fix by hand
(`hand`: tokenised once) run alternately under `gpuscout watch --steps N` (ABAB; the ratio of the
median samples/s), then `gpuscout tune --patch` on the unchanged script. Prints one line per mode.

    PYTHONPATH=src python benchmarks/tune_input_bound.py --out OUT --modes threads,processes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from tune_script_on_gpu import gpuscout  # noqa: E402  (benchmarks/ is the script's folder: on sys.path)

SCRIPT = Path(__file__).resolve().parent / "user_input" / "text_classifier.py"
# the tokeniser hashes words with hash(): every run, and every worker process, the same ids
os.environ["PYTHONHASHSEED"] = "0"


def rate(report: dict | None) -> float | None:
    runs = (report or {}).get("runs") or []
    return runs[0].get("throughput", {}).get("median") if runs else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--modes", default="threads,processes,generator")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--budget", default="5")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = str(args.out / "results.sqlite")
    lines = []
    for mode in args.modes.split(","):
        rates = {"script": [], "hand": []}
        for turn in ("script", "hand", "script", "hand"):
            report, _ = gpuscout(
                "watch",
                "--json",
                "--steps",
                str(args.steps),
                "--store",
                store,
                "--",
                sys.executable,
                str(SCRIPT),
                mode if turn == "script" else "hand",
                out=args.out,
                name=f"{mode}-{turn}-{len(rates[turn])}",
                timeout=560,
            )
            rates[turn].append(rate(report))
        hand = (
            statistics.median(rates["hand"]) / statistics.median(rates["script"])
            if all(rates["hand"] + rates["script"])
            else None
        )
        patch = args.out / f"{mode}.patch"
        report, wall = gpuscout(
            "tune",
            "--json",
            "--budget-minutes",
            args.budget,
            "--patch",
            str(patch),
            "--store",
            store,
            "--",
            sys.executable,
            str(SCRIPT),
            mode,
            out=args.out,
            name=f"{mode}-tune",
            timeout=560,
        )
        best = (report or {}).get("best") or {}
        copy = (report or {}).get("patched") or {}
        line = {
            "mode": mode,
            "hand_speedup": hand,
            "hand_rates": rates,
            "tune_path": (report or {}).get("path"),
            "tune_speedup": best.get("ratio"),
            "tune_ci": [best.get("ratio_low"), best.get("ratio_high")],
            "copy_speedup": copy.get("ratio"),
            "copy_ci": [copy.get("ratio_low"), copy.get("ratio_high")],
            "agrees": copy.get("agrees"),
            "of_hand": best.get("ratio") / hand if hand and best.get("ratio") else None,
            "tune_wall_s": wall,
            "left": (report or {}).get("left"),
        }
        lines.append(line)
        print(json.dumps(line), flush=True)
    (args.out / "summary.json").write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
