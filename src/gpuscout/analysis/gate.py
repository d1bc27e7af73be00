"""`compare --fail-slower PCT`: a CI gate on training speed (issue 63), as pytest-benchmark's
`--benchmark-compare-fail=mean:5%` and asv's `continuous` gate theirs.

Each group of a comparison against its baseline (analysis/compare.py: the same test, the same
interval) is one of:

- `slower`: slower with significance AND by more than PCT percent (its ratio of medians under
  1 - PCT/100): the build fails (exit 1). A significant 2% on a 5% gate passes: a gate that
  failed on every real but small difference would be turned off;
- `ok`: anything else that could be decided;
- `undecided`: one run a side (below), or nothing could be compared at all (different workloads
  or methodology versions are never compared): exit 3, its own status, so a CI that means "no
  data" is not read as "no regression".

The unit of the gate's test is the run, not the window. A run's windows share what one process
drew: its compilation and autotuning, its memory layout, the GPU's clocks. Unchanged runs of one
script on an H200 differed by up to 21% between processes while each run's windows agreed within
2% (docs/benchmarks.md, "The CI gate on an H200"), so a test of one run's windows against
another's called 2 of 3 unchanged pull requests slower (p < 1e-28). So:

- two runs or more a side: Welch's t on the runs' log medians (each run one value), the ratio
  exp(mean difference) with its t interval;
- one run against two or more: that run against the others' spread, as a new observation
  (t = d / (s * sqrt(1 + 1/n)), n - 1 degrees of freedom: the prediction interval's test);
- one run a side: `undecided`. Nothing in one run each says how far unchanged runs fall apart;
  the line says to measure each side two or more times (docs/ci.md's recipe measures three).

A comparison across machines (another host, CPU or GPU: a baseline exported elsewhere) is said in
the line: the gate still runs, and the reader knows what the figure stands on.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from gpuscout.analysis.compare import ALPHA, Comparison, Group, welch_log, window_values
from gpuscout.record import StoredRecord

EXIT_SLOWER = 1
EXIT_UNDECIDED = 3


@dataclass
class GateLine:
    """One group against its baseline, as the gate reads it."""

    outcome: str  # slower | ok | undecided
    workload: str
    baseline: str  # the baseline group's label (a run id with `compare BASE NEW`)
    candidate: str
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    p_value: float | None
    test: str | None
    machines: str | None  # how the two sides' machines differ, where they do
    text: str


@dataclass
class GateResult:
    fail_slower_pct: float
    lines: list[GateLine] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(line.outcome == "slower" for line in self.lines):
            return EXIT_SLOWER
        if not self.lines or any(line.outcome == "undecided" for line in self.lines):
            return EXIT_UNDECIDED
        return 0


def gate(comparisons: list[Comparison], records: list[StoredRecord], fail_slower_pct: float) -> GateResult:
    """Each comparison's groups against its baseline, read against the threshold; `records`: the
    runs compared (for the machines they ran on)."""
    by_id = {r.id: r for r in records}
    out = GateResult(fail_slower_pct)
    for c in comparisons:
        base = c.groups[0]
        for g in c.groups[1:]:
            out.lines.append(_line(c, base, g, fail_slower_pct, _machines(base, g, by_id), by_id))
    if not out.lines:
        out.lines.append(
            GateLine(
                "undecided", "", "", "", None, None, None, None, None, None,
                "cannot decide: no two of the selected runs can be compared (another workload, or another "
                "methodology version): nothing was gated",
            )
        )  # fmt: skip
    return out


@dataclass
class RunTest:
    """The candidate's runs against the baseline's, each run one value."""

    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    test: str  # "welch-t on 3+3 runs", "prediction-t on 1+3 runs"


def run_test(baseline: list[float], candidate: list[float]) -> RunTest | None:
    """Each side's runs' median throughputs; None with one run a side (nothing to test against)."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    nb, nc = len(baseline), len(candidate)
    if nb < 2 and nc < 2:
        return None
    if nb >= 2 and nc >= 2:
        diff, se, df = welch_log(candidate, baseline)
        name = "welch-t"
    else:  # one run against the spread of the other side's
        lb, lc = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
        diff = float(lc.mean() - lb.mean())
        many = lb if nb >= 2 else lc
        se = float(many.std(ddof=1)) * math.sqrt(1 + 1 / len(many))
        df = len(many) - 1
        name = "prediction-t"
    if se == 0:  # every run alike on both sides: equal, or as different as can be
        p, half = (1.0 if diff == 0 else 0.0), 0.0
    else:
        p = float(2 * student_t.sf(abs(diff / se), df))
        half = float(student_t.ppf(0.975, df)) * se
    return RunTest(math.exp(diff), math.exp(diff - half), math.exp(diff + half), p, f"{name} on {nc}+{nb} runs")


def _line(
    c: Comparison, base: Group, g: Group, pct: float, machines: str | None, by_id: dict[str, StoredRecord]
) -> GateLine:
    runs = [[_run_median(by_id[i]) for i in group.run_ids if i in by_id] for group in (base, g)]
    tested = run_test(*runs)
    ratio, low, high = (
        (tested.ratio, tested.ratio_low, tested.ratio_high) if tested else (g.ratio, g.ratio_low, g.ratio_high)
    )
    interval = f" [95% CI {low:.3f}-{high:.3f}]" if low is not None else ""
    change = (1 - ratio) * 100 if ratio is not None else None
    how = (
        f"{abs(change):.1f}% {'slower' if change > 0 else 'faster'} (ratio {ratio:.3f}{interval})"
        if change is not None
        else "unmeasured"
    )
    test = f", p={tested.p_value:.3g} ({tested.test})" if tested else ""
    where = f"; {machines}" if machines else ""
    said = f"{c.workload}: {g.label} against {base.label}: {how}{test}"
    significant = tested is not None and tested.p_value < ALPHA
    if tested is None:
        outcome, text = (
            "undecided",
            (
                f"cannot decide: {said}: one run a side cannot tell a change from run-to-run variation; measure each "
                f"side 2 or more times (docs/ci.md){where}"
            ),
        )
    elif significant and ratio < 1 - pct / 100:
        outcome, text = "slower", f"FAIL: {said}: slower with significance, more than the {pct:g}% allowed{where}"
    else:
        why = (
            "no significant difference"
            if not significant
            else f"slower with significance, within the {pct:g}% allowed"
            if ratio < 1
            else "faster with significance"
        )
        outcome, text = "ok", f"ok: {said}: {why}{where}"
    return GateLine(outcome, c.workload, base.label, g.label, ratio, low, high, tested and tested.p_value,
                    tested and tested.test, machines, text)  # fmt: skip


def _run_median(record: StoredRecord) -> float:
    """A run's one value: the median of its windows' throughputs (samples/s for a watched script)."""
    return float(statistics.median(window_values(record)))


def _machines(base: Group, g: Group, by_id: dict[str, StoredRecord]) -> str | None:
    """How the machines of the baseline's runs and the candidate's differ (host, CPU, GPU)."""
    sides = [[by_id[i] for i in group.run_ids if i in by_id] for group in (base, g)]
    differ = []
    for name, get in (
        ("host", lambda r: r.env.hostname),
        ("CPU", lambda r: r.env.cpu_model),
        ("GPU", lambda r: r.gpu.name if r.gpu else "none"),
    ):
        seen = [sorted({str(get(r)) for r in side}) for side in sides]
        if seen[0] and seen[1] and seen[0] != seen[1]:
            differ.append(f"{name} {', '.join(seen[0])} against {', '.join(seen[1])}")
    return "measured on different machines: " + "; ".join(differ) if differ else None
