"""`compare --fail-slower PCT` (analysis/gate.py, issue 63) on runs made by hand: a run 10% slower
fails a 5% gate, one 2% slower with significance passes it, an equal one passes, one window a run
cannot be decided, and runs from other machines are said to be."""

from gpuscout.analysis.compare import compare
from gpuscout.analysis.gate import EXIT_SLOWER, EXIT_UNDECIDED, gate
from gpuscout.record.run import Environment
from tests.records import make_record

# eight windows a run, a spread of +-0.5%: Mann-Whitney can decide (4 + 4 windows and more)
SPREAD = [0.995, 0.997, 0.999, 1.0, 1.0, 1.001, 1.003, 1.005]


def run(run_id: str, median: float, **changes):
    return make_record(run_id, rates=[median * s for s in SPREAD], **changes)


def gated(base, new, pct: float = 5.0):
    records = [base, new]
    return gate(compare(records, "run"), records, pct)


def test_a_run_slower_by_more_than_the_threshold_fails_with_its_ratio_and_interval():
    result = gated(run("base0001", 1000.0), run("new00001", 900.0))
    [line] = result.lines
    assert result.exit_code == EXIT_SLOWER and line.outcome == "slower"
    assert abs(line.ratio - 0.9) < 1e-9 and line.ratio_low <= 0.9 <= line.ratio_high
    assert line.text.startswith("FAIL: mlp: new00001 against base0001: 10.0% slower (ratio 0.900 [95% CI 0.")
    assert "slower with significance, more than the 5% allowed" in line.text and "machines" not in line.text


def test_a_significant_difference_within_the_threshold_and_an_equal_run_pass():
    """2% slower is significant at these windows (every window of one below every window of the
    other) and passes a 5% gate; the same run again passes as no significant difference."""
    small = gated(run("base0001", 1000.0), run("new00001", 980.0))
    assert small.exit_code == 0 and "slower with significance, within the 5% allowed" in small.lines[0].text
    assert small.lines[0].text.startswith("ok: ") and "2.0% slower" in small.lines[0].text
    same = gated(run("base0001", 1000.0), run("new00001", 1000.0))
    assert same.exit_code == 0 and same.lines[0].text.endswith("no significant difference")
    faster = gated(run("base0001", 1000.0), run("new00001", 1200.0))
    assert faster.exit_code == 0 and "20.0% faster" in faster.lines[0].text


def test_what_cannot_be_decided_has_its_own_exit_status():
    """One window a run: no test can tell (exit 3, not 0: a CI without data is not a pass); runs of
    two workloads: nothing compared at all."""
    one = gated(make_record("base0001", rates=[1000.0]), make_record("new00001", rates=[500.0]))
    assert one.exit_code == EXIT_UNDECIDED and one.lines[0].text.startswith("cannot decide: ")
    other = gated(run("base0001", 1000.0), run("new00001", 500.0, workload="resnet50"))
    assert other.exit_code == EXIT_UNDECIDED and "no two of the selected runs can be compared" in other.lines[0].text


def test_runs_from_other_machines_are_said_to_be():
    here = Environment(
        gpuscout_version="0.1.0", methodology_version=1, schema_version=2, hostname="ci-7", cpu_model="EPYC"
    )
    there = here.model_copy(update={"hostname": "laptop", "cpu_model": "Xeon"})
    result = gated(run("base0001", 1000.0, env=there), run("new00001", 1000.0, env=here))
    assert result.exit_code == 0
    assert result.lines[0].machines == "measured on different machines: host laptop against ci-7; CPU Xeon against EPYC"
    assert result.lines[0].text.endswith(result.lines[0].machines)
