"""tune's confirmation (tune/confirm.py) on records made by hand: the setting the search chose and
the baseline run alternately after the search, each run one value, tested between runs; kept only
where that test clears the margin. No process runs: `run` returns a record of the rate asked."""

import math

import pytest
from scipy.stats import t as student_t

from gpuscout.core.tune_settings import TuneSettings
from gpuscout.tune import confirm, finale, search, trials
from gpuscout.tune.change import Change, Plan
from tests.unit.test_tune_search import BATCH, STEPS, record

THREADS = Change("workers_2_threads", "workers", {"workers": 2}, "workers=2", "the input waits")
CACHE = Change("cache", "cache", {"cache": True}, "model.fit(CachedBatches(dataset), ...)", "repeats")


def chosen(change: Change, ratio_low: float = 1.3) -> trials.Outcome:
    """A search outcome whose round chose `change` (its runs and the baseline runs beside it)."""
    trial = trials.Trial(1, change, trials.Config((change,)), trials.Config(), 300)
    trial.runs, trial.beside = [record(1440.0)], [record(1000.0), record(1000.0)]
    trial.judge(BATCH)
    trial.row.ratio_low = ratio_low  # what the round's pooled windows said
    trial.row.chosen = True
    return trials.Outcome(path=[trial], trials=[trial], rounds=1)


def runner(base: list[float], best: list[float]):
    """Runs whose rates come from each side's list in turn; the names asked, in order."""
    asked, sides = [], {"base": iter(base), "best": iter(best)}

    def run(config, name, steps, command=None, at_most_s=None):
        asked.append(name)
        return record(next(sides["best" if config.changes else "base"]), jitter=0.0)

    return run, asked


def test_a_large_gain_is_confirmed_by_two_runs_a_side_taken_alternately():
    """ABAB, who goes first alternating: the baseline, the setting, the setting, the baseline."""
    run, asked = runner([1000.0, 1010.0], [9000.0, 9100.0])
    out = confirm.confirm(run, chosen(CACHE), search.Budget(3600), 300, 300, BATCH, [])
    assert asked == ["baseline again", "cache (confirming)", "cache (confirming)", "baseline again"]
    assert out.verdict == confirm.CONFIRMED and out.tested.ratio_low > 8


def test_the_figure_is_the_ratio_of_the_runs_geometric_means_with_the_pooled_interval():
    """By hand: logs of 1000 and 1040 against 1200 and 1260; the ratio exp(mean difference), the
    interval exp(d -+ t(0.975, 2) * s * sqrt(1/2 + 1/2)), s^2 the two sides' squares about their own
    means over 2 degrees of freedom; a repeated setting of the session beside them adds its own."""
    run, _ = runner([1000.0, 1040.0], [1200.0, 1260.0])
    out = confirm.confirm(run, chosen(THREADS), search.Budget(3600), 300, 300, BATCH, [])
    lb, lc = [math.log(1000), math.log(1040)], [math.log(1200), math.log(1260)]
    d = sum(lc) / 2 - sum(lb) / 2
    ss = sum((v - sum(g) / 2) ** 2 for g in (lb, lc) for v in g)
    half = student_t.ppf(0.975, 2) * math.sqrt(ss / 2)
    assert out.tested.ratio == pytest.approx(math.exp(d))
    assert out.tested.ratio_low == pytest.approx(math.exp(d - half))
    assert out.tested.ratio_high == pytest.approx(math.exp(d + half))
    assert out.tested.ratio == pytest.approx(math.sqrt(1200 * 1260) / math.sqrt(1000 * 1040))
    assert out.tested.test == "pooled-t on 2+2 runs, the spread of 4"
    # another setting run twice in the session (3000, 3060): 3 degrees of freedom, its square added
    again = [record(3000.0, jitter=0.0), record(3060.0, jitter=0.0)]
    run, _ = runner([1000.0, 1040.0], [1200.0, 1260.0])
    wider = confirm.confirm(
        run, chosen(THREADS), search.Budget(3600), 300, 300, BATCH, [], beside=[(again, TuneSettings())]
    )
    ss += 2 * ((math.log(3060) - math.log(3000)) / 2) ** 2
    half = student_t.ppf(0.975, 3) * math.sqrt(ss / 3)
    assert wider.tested.ratio_low == pytest.approx(math.exp(d - half))
    assert wider.tested.test == "pooled-t on 2+2 runs, the spread of 6"


def test_a_change_that_buys_nothing_is_never_kept_on_a_noisy_host():
    """Issue 86, item 1: the round picked threads at 1.44x from one lucky run; the runs after the
    search spread 8% either way around the baseline's pace. Not kept, and the runs stop once the
    projection says more would not settle it (or at MOST_RUNS a side)."""
    noise = [1.0, 1.08, 0.93, 1.05, 0.95, 1.02, 0.97, 1.06, 0.94, 1.01, 0.99, 1.04]
    run, asked = runner([1000 * n for n in noise], [1000 * n for n in reversed(noise)])
    found = chosen(THREADS)
    out = confirm.confirm(run, found, search.Budget(3600), 300, 300, BATCH, [])
    assert out.verdict != confirm.CONFIRMED, out
    assert len(asked) <= 2 * confirm.MOST_RUNS
    said = confirm.explained(out)
    assert said.startswith(("undecided", "not confirmed")), said


def test_a_small_real_gain_takes_more_runs_and_is_confirmed():
    """3% faster on a host whose runs spread 1.5%: two runs a side do not settle it, more do."""
    base = [1000.0, 1015.0, 990.0, 1008.0, 996.0, 1004.0]
    run, asked = runner(base, [1.03 * b for b in reversed(base)])
    out = confirm.confirm(run, chosen(THREADS), search.Budget(3600), 300, 300, BATCH, [])
    assert out.verdict == confirm.CONFIRMED and len(asked) > 4, (asked, out)


def test_the_budget_ending_first_leaves_it_undecided_and_says_how_many_runs_would_settle_it():
    """Runs of 20 s and 85 s left: four runs, not six; undecided, with the projection."""
    noise = [1000.0, 1030.0, 1000.0, 1030.0]  # 5% faster: two runs a side leave it open, four would not
    run, asked = runner(noise, [1.05 * n for n in reversed(noise)])
    budget = search.Budget(85.0)  # each run is charged its 20 s as it ends (budget.seen)

    def charged(config, name, steps, command=None, at_most_s=None):
        budget.started -= 20.0
        return run(config, name, steps)

    out = confirm.confirm(charged, chosen(THREADS), budget, 300, 300, BATCH, [])
    assert len(asked) == 4 and out.verdict == confirm.UNDECIDED
    said = confirm.explained(out)
    assert "--budget-minutes held 2 and 2 runs" in said and "runs a side would settle it" in said, said


def test_a_setting_far_past_the_baseline_runs_once_against_round_one_s_warm_baseline_runs():
    """Outcome.clear (3x by its round's low end): round 1's two warm baseline runs (never the probe)
    and one run of the setting after its choice settle it."""
    run, asked = runner([], [10_000.0])
    found = chosen(CACHE, ratio_low=9.0)
    assert found.clear
    out = confirm.confirm(run, found, search.Budget(3600), 300, 300, BATCH, [])
    assert asked == ["cache (confirming)"] and out.confirmed
    assert confirm.explained(out) == (
        "confirmed by 1 run of it after the search against 2 baseline runs (2 of round 1's: past 3x, no drift "
        "between them matters)"
    )
    assert out.baseline == found.path[0].beside and out.tested.test.startswith("pooled-t on 1+2")


def test_a_failed_run_of_the_setting_is_not_confirmed():
    def run(config, name, steps, command=None, at_most_s=None):
        made = record(3000.0 if config.changes else 1000.0)
        return made.model_copy(update={"status": "failed"}) if config.changes else made

    out = confirm.confirm(run, chosen(CACHE), search.Budget(3600), 300, 300, BATCH, [])
    assert out.verdict == confirm.NOT_CONFIRMED and "ended failed" in out.reason


def test_the_session_keeps_only_what_is_confirmed_with_one_figure():
    """The whole session on hand-made runs: the round chose threads at 1.44x (a lucky run); the runs
    after the search read the baseline's pace. Nothing kept, no path, no lines to write, and the
    best row's figure is the one between runs, the same in the summary."""
    rates = iter([1000.0, 1000.0, 1440.0, 1000.0])  # probe, warm baseline, threads, baseline again

    def run(config, name, steps, command=None, at_most_s=None):
        rate = next(rates, None)
        if rate is None:
            rate = 1000.0 * (1.0 + 0.03 * (-1) ** len(ran))
        ran.append(name)
        return record(rate)

    ran: list[str] = []
    probe = run(trials.Config(), "baseline", 300)
    budget = search.Budget(3600)
    budget.seen(probe)
    found = search.search(run, lambda f, k: Plan(changes=[THREADS] if not k else []), probe, budget, 4, STEPS)
    assert [t.change.name for t in found.path] == ["workers_2_threads"] and found.path[0].row.chosen

    class Session:
        patch = None

    Session.probe = probe
    final = finale.measure(run, found, Session(), budget, STEPS)
    best = finale._best(found, final.confirmed, BATCH)
    assert not final.confirmed.confirmed and best.kept is False and not found.path[0].row.kept
    assert best.ratio == pytest.approx(final.confirmed.tested.ratio) and best.ratio < 1.1
    said = finale.summary(found, best, final.confirmed)
    assert said.startswith("nothing kept: baseline -> +workers_2_threads was chosen in its round, then ")
    assert f"{best.ratio:.2f}x [{best.ratio_low:.2f}-{best.ratio_high:.2f}]" in said


def test_the_patched_copy_is_one_run_against_the_spread_the_session_saw():
    """By hand: the copy's 5,000 samples/s against baseline runs of 1,000 and 1,040, the spread
    pooled with the best's runs of 5,100 and 4,900 (each about its own mean), 2 degrees of freedom:
    t = d / (s * sqrt(1/2 + 1)). Against the two baseline runs alone it would have one (t 12.7)."""
    from gpuscout.analysis.between_runs import pooled_test

    tested = pooled_test([1000.0, 1040.0], [5000.0], [[5100.0, 4900.0]])
    lb, lc = [math.log(1000), math.log(1040)], [math.log(5100), math.log(4900)]
    ss = sum((v - sum(g) / 2) ** 2 for g in (lb, lc) for v in g)
    s = math.sqrt(ss / 2)
    d = math.log(5000) - sum(lb) / 2
    half = student_t.ppf(0.975, 2) * s * math.sqrt(1.5)
    assert tested.ratio == pytest.approx(math.exp(d))
    assert (tested.ratio_low, tested.ratio_high) == pytest.approx((math.exp(d - half), math.exp(d + half)))
    assert tested.test == "pooled-t on 1+2 runs, the spread of 4" and tested.ratio_low > 3
    assert pooled_test([1000.0], [5000.0], []) is None  # no spread to judge it by


def test_a_noisy_host_s_large_gain_is_decided_by_the_spread_the_session_saw():
    """The H100's case (docs/benchmarks.md, issue 86): a 6x setting, the baseline's two runs 33%
    apart (3,368 and 4,482 by whole epochs). Welch's t on 2+2 runs keeps about one degree of freedom
    there (the best's runs agree, and carry none of the spread): [0.26-139] after 1 run of it. Pooled
    with the best's runs and a reference setting run twice, it is decided."""
    from gpuscout.analysis.between_runs import pooled_test, run_test

    base, best, again = [3368.0, 4482.0], [23324.0, 23561.0], [24794.0, 20925.0]
    assert run_test(base, best).ratio_low < 1.01  # Welch: undecided
    decided = pooled_test(base, best, [again])
    assert decided.ratio_low > 3 and decided.test == "pooled-t on 2+2 runs, the spread of 6"
    # round 1's three warm baseline runs (confirm.warm_baselines) and the one run of it the budget held
    one = pooled_test([4482.0, 3368.0, 4157.0], [23324.0], [])
    assert one.ratio_low > 2 and one.test == "pooled-t on 1+3 runs, the spread of 3"
