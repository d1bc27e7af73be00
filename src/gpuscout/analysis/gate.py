"""`compare --fail-slower PCT`: a CI gate on training speed (issue 63), as pytest-benchmark's
`--benchmark-compare-fail=mean:5%` and asv's `continuous` gate theirs.

Each group of a comparison against its baseline (analysis/compare.py: the same test, the same
interval) is one of:

- `slower`: slower with significance AND by more than PCT percent (its ratio of medians under
  1 - PCT/100): the build fails (exit 1). A significant 2% on a 5% gate passes: a gate that
  failed on every real but small difference would be turned off;
- `ok`: anything else that could be decided;
- `undecided`: the test could not decide (too few windows), or nothing could be compared at all
  (different workloads or methodology versions are never compared): exit 3, its own status, so a
  CI that means "no data" is not read as "no regression".

A comparison across machines (another host, CPU or GPU: a baseline exported elsewhere) is said in
the line: the gate still runs, and the reader knows what the figure stands on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscout.analysis.compare import Comparison, Group
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
            out.lines.append(_line(c, base, g, fail_slower_pct, _machines(base, g, by_id)))
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
    interval = f" [95% CI {g.ratio_low:.3f}-{g.ratio_high:.3f}]" if g.ratio_low is not None else ""
    change = (1 - g.ratio) * 100 if g.ratio is not None else None
    how = (
        f"{abs(change):.1f}% {'slower' if change > 0 else 'faster'} (ratio {g.ratio:.3f}{interval})"
        if change is not None
        else "unmeasured"
    )
    test = f", p={g.p_value:.3g} ({g.test})" if g.p_value is not None else ""
    where = f"; {machines}" if machines else ""
    said = f"{c.workload}: {g.label} against {base.label}: {how}{test}"
    if g.test == "too few windows":
        outcome, text = "undecided", f"cannot decide: {said}: {g.verdict}{where}"
    elif g.verdict == "slower" and g.ratio is not None and g.ratio < 1 - pct / 100:
        outcome, text = "slower", f"FAIL: {said}: slower with significance, more than the {pct:g}% allowed{where}"
    else:
        why = (
            f"slower with significance, within the {pct:g}% allowed"
            if g.verdict == "slower"
            else g.verdict
            if g.verdict != "faster"
            else "faster with significance"
        )
        outcome, text = "ok", f"ok: {said}: {why}{where}"
    return GateLine(outcome, c.workload, base.label, g.label, g.ratio, g.ratio_low, g.ratio_high, g.p_value, g.test,
                    machines, text)  # fmt: skip


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
