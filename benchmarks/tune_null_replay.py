"""tune's two rules replayed on real runs of one unchanged setting: how often each calls a change
that buys nothing faster (issue 86, item 1's false alarms), in thousands of draws.

A store from benchmarks/tune_false_alarms.py holds many warm runs of one script's baseline (three
a session, each by the script's own epoch clock, made beside the noisy neighbour). Any of them is
as much a run of "a change that buys nothing" as of the baseline, so each draw relabels runs of
that one setting:

- the old rule (what tune kept before issue 86): one run as the candidate against two runs as the
  reference beside it, judged as a round judges (tune/judging.judged: the epochs, or windows,
  pooled inside the runs); "faster" is a false alarm;
- the new rule: a draw the old rule called faster is then confirmed as tune/confirm.py confirms,
  with further runs drawn (without replacement) for each side as it asks for them; "confirmed"
  is a false alarm that would be kept.

    python benchmarks/tune_null_replay.py STORE [--script locked] [--draws 2000] [--seed 86]

Prints the runs used and their spread, the old rule's false alarms, and the new rule's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections import Counter
from pathlib import Path

from gpuscout.store import Store
from gpuscout.tune import confirm, judging, search, trials
from gpuscout.tune.change import Change

NOTHING = Change("workers_2_threads", "workers", {"workers": 2}, "workers=2", "the input waits")


def runs_of(store: Path, script: str) -> list:
    """The warm baseline runs of `script` (the last word of its command) at their most common count."""
    with Store(store, readonly=True) as opened:
        found = [
            r
            for r in opened.list(kind="watch")
            if r.command and r.command[-1] == script and r.tune_change is None and r.ok and r.clock and r.main
        ]
    count = Counter(r.main.steps for r in found).most_common(1)[0][0]  # the probe's (cold) count differs
    return [r for r in found if r.main.steps == count]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--script", default="locked")
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=86)
    args = parser.parse_args()
    pool = runs_of(args.store, args.script)
    rng = random.Random(args.seed)
    rates = [r.clock.samples_per_s for r in pool]
    print(
        f"{len(pool)} warm runs of `{args.script}` at {pool[0].main.steps} steps: {min(rates):,.0f} to "
        f"{max(rates):,.0f} samples/s by whole epochs (median {statistics.median(rates):,.0f}, "
        f"{(max(rates) / min(rates) - 1):.0%} apart at the extremes)"
    )
    batch = pool[0].batch_size
    chosen = kept = 0
    spent = []
    for _ in range(args.draws):
        drawn = rng.sample(pool, len(pool))
        candidate, beside, rest = drawn[0], drawn[1:3], iter(drawn[3:])
        row = judging.judged(NOTHING, [candidate], beside, batch)
        if not (row.verdict == "faster" and row.healthy):
            continue
        chosen += 1
        trial = trials.Trial(1, NOTHING, trials.Config((NOTHING,)), trials.Config(), pool[0].main.steps)
        trial.runs, trial.beside, trial.row = [candidate], beside, row
        found = trials.Outcome(path=[trial], trials=[trial], rounds=1)
        asked = []

        def run(config, name, steps, command=None, at_most_s=None, asked=asked, rest=rest):
            asked.append(name)
            return next(rest)

        try:
            checked = confirm.confirm(run, found, search.Budget(1e9), trial.steps, trial.steps, batch, [])
        except StopIteration:  # the pool ran out for this draw: counted as not kept, said below
            spent.append(len(asked))
            continue
        kept += checked.confirmed
        spent.append(len(asked))
    print(f"old rule (the round's pick kept): {chosen} of {args.draws} draws called faster ({chosen / args.draws:.1%})")
    print(
        f"new rule (kept only where runs after it confirm): {kept} of {args.draws} ({kept / args.draws:.2%}); "
        f"confirmation runs a draw it reached: median {statistics.median(spent) if spent else 0:g}, "
        f"most {max(spent, default=0)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
