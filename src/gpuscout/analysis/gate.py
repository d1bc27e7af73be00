"""`compare --fail-slower PCT`: a CI gate on training speed (issues 63 and 75), as
pytest-benchmark's `--benchmark-compare-fail=mean:5%` and asv's `continuous` gate theirs, but
deciding only what its data can decide (a non-inferiority test: the gate's claim "no slowdown
beyond PCT" must be shown, not assumed from a test that found nothing).

Each group of a comparison against its baseline, run by run (analysis/between_runs.py: each run
one value, the ratio's 95% interval drawn from the spread between runs), is one of:

- `ok` (exit 0): the interval's low end is at or above 1 - PCT/100: it rules out a slowdown
  beyond PCT. A significant 2% on a 5% gate passes when its interval stays within the 5%;
- `slower` (exit 1): slower with significance (the interval below 1) AND by more than PCT
  percent (its ratio under 1 - PCT/100);
- `undecided` (exit 3): anything else. Two runs a side whose spread hides a 2.7x slowdown
  (medians 1,471 and 2,368 samples/s against 631 and 737: ratio 0.365, 95% interval 0.043-3.09)
  are not a pass: the line says about how many runs a side would decide at the spread seen
  (between_runs.runs_to_decide). One run a side, or nothing comparable (another workload or
  methodology version), is undecided too: a CI without data is not a pass.

A comparison across machines (another host, CPU or GPU: a baseline exported elsewhere) is said in
the line: the gate still runs, and the reader knows what the figure stands on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from gpuscout.analysis.between_runs import MOST_RUNS, run_test, runs_to_decide
from gpuscout.analysis.compare import ALPHA, Comparison, Group
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
    runs_needed: int | None = None  # undecided: about how many runs a side would decide


@dataclass
class GateResult:
    fail_slower_pct: float
    lines: list[GateLine] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)  # what the lines were read from

    @property
    def exit_code(self) -> int:
        if any(line.outcome == "slower" for line in self.lines):
            return EXIT_SLOWER
        if not self.lines or any(line.outcome == "undecided" for line in self.lines):
            return EXIT_UNDECIDED
        return 0

    def as_json(self) -> dict[str, object]:
        return {
            "fail_slower_pct": self.fail_slower_pct,
            "exit_code": self.exit_code,
            "lines": [asdict(line) for line in self.lines],
            "comparisons": [c.to_dict() for c in self.comparisons],
        }


def gate(comparisons: list[Comparison], records: list[StoredRecord], fail_slower_pct: float) -> GateResult:
    """Each comparison's groups against its baseline, read against the threshold; `records`: the
    runs compared (for the machines they ran on)."""
    by_id = {r.id: r for r in records}
    out = GateResult(fail_slower_pct, comparisons=comparisons)
    for c in comparisons:
        base = c.groups[0]
        for g in c.groups[1:]:
            out.lines.append(_line(c, base, g, fail_slower_pct, _machines(base, g, by_id)))
        if c.empty:  # a run that measured nothing is no evidence of speed either way: never a pass (issue 87)
            out.lines.append(
                GateLine(
                    "undecided", c.workload, base.label, ", ".join(c.empty), None, None, None, None, None, None,
                    f"cannot decide: {c.workload}: run {', '.join(c.empty)} read no throughput (0 {c.unit}), "
                    "and a run that measured nothing is not a pass; see why it did (gpuscout results show RUN) "
                    "and measure it again",
                )
            )  # fmt: skip
    if not out.lines:
        out.lines.append(
            GateLine(
                "undecided", "", "", "", None, None, None, None, None, None,
                "cannot decide: no two of the selected runs can be compared (another workload, or another "
                "methodology version): nothing was gated",
            )
        )  # fmt: skip
    return out


def _line(c: Comparison, base: Group, g: Group, pct: float, machines: str | None) -> GateLine:
    tested = run_test(base.runs, g.runs)
    ratio = tested.ratio if tested else g.ratio
    low, high = (tested.ratio_low, tested.ratio_high) if tested else (None, None)
    interval = f" [95% CI {_ratio(low)}-{_ratio(high)}]" if low is not None and high is not None else ""
    how = "unmeasured"
    if ratio is not None:
        change = (1 - ratio) * 100
        how = f"{abs(change):.1f}% {'slower' if change > 0 else 'faster'} (ratio {_ratio(ratio)}{interval})"
    test = f", p={tested.p_value:.3g} ({tested.test})" if tested else ""
    where = f"; {machines}" if machines else ""
    said = f"{c.workload}: {g.label} against {base.label}: {how}{test}"
    threshold = 1 - pct / 100
    needed = None
    if tested is None:
        outcome, text = (
            "undecided",
            f"cannot decide: {said}: one run a side cannot tell a change from run-to-run variation; measure each "
            f"side 2 or more times (docs/ci.md){where}",
        )
    elif tested.ratio_low >= threshold:
        significant = tested.p_value < ALPHA
        why = (
            "no significant difference"
            if not significant
            else f"slower with significance, within the {pct:g}% allowed"
            if tested.ratio < 1
            else "faster with significance"
        )
        outcome, text = (
            "ok",
            f"ok: {said}: the interval rules out a slowdown beyond the {pct:g}% allowed ({why}){where}",
        )
    elif tested.p_value < ALPHA and tested.ratio < threshold:
        outcome, text = "slower", f"FAIL: {said}: slower with significance, more than the {pct:g}% allowed{where}"
    else:
        needed = runs_to_decide(tested, threshold)
        more = (
            f"about {needed} runs a side would decide at the spread seen"
            if needed is not None
            else f"more than {MOST_RUNS} runs a side would be needed at the spread seen: the ratio lies that close "
            f"to the {pct:g}% allowed"
        )
        outcome, text = (
            "undecided",
            f"cannot decide: {said}: the interval holds both a slowdown beyond the {pct:g}% allowed and "
            f"{'no slowdown at all' if tested.ratio_high >= 1 else 'one within it'}; {more} (docs/ci.md){where}",
        )
    return GateLine(outcome, c.workload, base.label, g.label, ratio, low, high,
                    tested.p_value if tested else None, tested.test if tested else None, machines, text,
                    needed)  # fmt: skip


def _ratio(x: float) -> str:
    """A ratio in a line, at three significant digits however small or large (never 1e297 in full)."""
    return f"{x:.3f}" if 0.001 <= x < 1000 else f"{x:.3g}"


def _machines(base: Group, g: Group, by_id: dict[str, StoredRecord]) -> str | None:
    """How the machines of the baseline's runs and the candidate's differ (host, CPU, GPU)."""
    sides = [[by_id[i] for i in group.run_ids if i in by_id] for group in (base, g)]
    differ = []
    got: tuple[tuple[str, Callable[[StoredRecord], object]], ...] = (
        ("host", lambda r: r.env.hostname),
        ("CPU", lambda r: r.env.cpu_model),
        ("GPU", lambda r: r.gpu.name if r.gpu else "none"),
    )
    for name, get in got:
        seen = [sorted({str(get(r)) for r in side}) for side in sides]
        if seen[0] and seen[1] and seen[0] != seen[1]:
            differ.append(f"{name} {', '.join(seen[0])} against {', '.join(seen[1])}")
    return "measured on different machines: " + "; ".join(differ) if differ else None
