"""Early stopping's rules (sweep/pruning.py, issue 64) on curves made by hand: a rung judges no one
until `factor` trials have reached it, a trial promoted early is judged again as peers arrive,
one bad epoch does not cut a trial, hyperband's brackets, the median rule, patience; and what the
summary says it saved."""

from collections import Counter

import pytest

from gpuscout.record.trial import TrialOutcome
from gpuscout.sweep import pruning
from gpuscout.sweep.pruning import bracket_of, bracket_shares, halving, judge, median, patience, smoothed
from gpuscout.sweep.results import EarlyStopSummary
from gpuscout.sweep.spec import EarlyStop, SweepFile
from gpuscout.sweep.stopping import could_have_won, synchronous_epochs, synchronous_schedule, trial_pace

RUNGS = [3, 9, 27]


def stopped_by(early_stop: dict) -> SweepFile:
    return SweepFile.model_validate(
        {
            "name": "s",
            "command": "python t.py {lr}",
            "metric": {"name": "acc"},
            "space": {"lr": [1, 2]},
            "early_stop": early_stop,
        }
    )


def flat(value: float, epochs: int) -> dict[int, float]:
    return {e: value for e in range(1, epochs + 1)}


def trials(*curves: dict[int, float]) -> list[tuple[int, dict[int, float]]]:
    """The other trials as the pruner gives them: indexes from 1 (this one is trial 0)."""
    return list(enumerate(curves, 1))


def test_the_best_of_the_last_reports_is_what_is_judged():
    curve = {1: 0.5, 2: 0.7, 3: 0.6}
    assert smoothed(curve, 3, 3, maximize=True) == 0.7 and smoothed(curve, 3, 1, maximize=True) == 0.6
    assert smoothed(curve, 3, 2, maximize=False) == 0.6 and smoothed(curve, 0, 3, maximize=True) is None


def test_a_rung_judges_no_one_until_factor_trials_reached_it_then_keeps_the_best_third():
    mine = flat(0.5, 3)
    # one peer at the rung: two trials, fewer than the factor of 3: no judgement yet
    assert not halving(mine, trials(flat(0.9, 3)), RUNGS, 3, 3, True, "acc").stop
    # six trials at epoch 3: the best 6 // 3 = 2 go on; this one ranks 6th
    verdict = halving(mine, trials(*(flat(v, 3) for v in (0.9, 0.8, 0.7, 0.6, 0.55))), RUNGS, 3, 3, True, "acc")
    assert verdict.stop and verdict.why == (
        "at epoch 3: acc 0.5 (best of its last 3) ranked 6 of the 6 trials that reached it; the best 2 go on (1 in 3): "
        "trials 1 (0.9) and 2 (0.8)"
    )
    # second of six goes on
    peers = trials(*(flat(v, 3) for v in (0.9, 0.8, 0.7, 0.6, 0.55)))
    assert not halving(flat(0.85, 3), peers, RUNGS, 3, 3, True, "a").stop


def test_a_reason_names_the_trials_that_went_on_best_first_four_at_most():
    """16 trials at epoch 3 keep the best 5; the last one's reason names four of them and counts
    the fifth: one line however many trials a sweep has."""
    peers = trials(*(flat(0.5 + v / 100, 3) for v in range(15)))  # trial i at 0.5 + (i - 1) / 100
    verdict = halving(flat(0.1, 3), peers, RUNGS, 3, 3, True, "acc")
    assert verdict.why.endswith(
        "the best 5 go on (1 in 3): trials 15 (0.64), 14 (0.63), 13 (0.62), 12 (0.61) and 1 more"
    )
    loss = median(flat(0.9, 3), trials(flat(0.3, 3), flat(0.2, 3), flat(0.4, 3)), 1, 1, False, "loss")
    assert loss.why.endswith("the median of the 3 other trials that reached it: trials 2 (0.2), 1 (0.3) and 3 (0.4)")


def test_a_trial_promoted_early_is_judged_again_when_its_peers_arrive():
    """It passed epoch 3 alone and is at epoch 12 now; five better trials have since reached epoch
    3 (and stopped there or not): at epoch 3 it ranks 6 of 6, and is stopped now."""
    early = flat(0.5, 12)
    later = trials(*(flat(v, 3) for v in (0.9, 0.8, 0.7, 0.6, 0.55)))
    verdict = halving(early, later, RUNGS, 3, 3, True, "acc")
    assert verdict.stop and verdict.why.startswith("at epoch 3: ")


def test_one_bad_epoch_does_not_cut_a_trial():
    """0.8, 0.9, then 0.5 at the rung: the best of its last three (0.9) leads peers whose best is
    0.85; judged on its last epoch alone (smooth 1) it would rank last of four and be cut."""
    mine = {1: 0.8, 2: 0.9, 3: 0.5}
    peers = trials(flat(0.85, 3), flat(0.84, 3), flat(0.83, 3))
    assert not halving(mine, peers, RUNGS, 3, 3, True, "acc").stop
    assert halving(mine, peers, RUNGS, 3, 1, True, "acc").stop


def test_the_median_rule_judges_where_the_others_are():
    peers = trials(flat(0.7, 5), flat(0.9, 5), flat(0.6, 2))
    # at epoch 5 two others are there (0.9, 0.7): the median 0.8; 0.75 is worse; named best first
    verdict = median(flat(0.75, 5), peers, 2, 3, True, "acc")
    assert verdict.stop and verdict.why == (
        "at epoch 5: acc 0.75 (best of its last 3) worse than 0.8, the median of the 2 other trials that reached "
        "it: trials 2 (0.9) and 1 (0.7)"
    )
    assert not median(flat(0.85, 5), peers, 2, 3, True, "acc").stop
    # ahead of every other trial (epoch 9, they are at 5 at most): judged at epoch 5, not let run
    ahead = median({**flat(0.75, 5), **{e: 0.95 for e in range(6, 10)}}, peers, 2, 3, True, "acc")
    assert ahead.stop and ahead.why.startswith("at epoch 5: ")
    # within the grace, or no other trial that far: no verdict; a loss is worse above the median
    assert not median(flat(0.1, 1), peers, 2, 3, True, "acc").stop
    assert not median(flat(0.1, 5), [], 2, 3, True, "acc").stop
    assert not median(flat(0.1, 5), trials(flat(0.9, 5)), 2, 3, True, "acc").stop  # one other: not a median
    # two others reached epoch 4, one epoch 5: judged at epoch 4, the furthest two have reached
    assert median(flat(0.75, 5), trials(flat(0.9, 5), flat(0.8, 4), flat(0.6, 4)), 2, 3, True, "a").why.startswith(
        "at epoch 4: a 0.75 (best of its last 3) worse than 0.8, the median of the 3 other trials"
    )
    assert median(flat(0.5, 3), trials(flat(0.3, 3), flat(0.4, 3)), 1, 1, False, "loss").stop


def test_hyperbands_brackets_share_the_trials_as_its_budget_does():
    # n_s ~ (s_max+1)/(s+1) x 3^s for s = 2, 1, 0: 9, 4.5 and 3 of 16.5
    assert [round(x, 6) for x in bracket_shares(3, 3)] == [round(9 / 16.5, 6), round(4.5 / 16.5, 6), round(3 / 16.5, 6)]
    assert bracket_shares(1, 3) == [1.0]
    # 16 trials: 8, 5 and 3 (the shares would give 8.7, 4.4, 2.9); the first four meet all three
    assert Counter(bracket_of(i, 3, 3) for i in range(16)) == {0: 8, 1: 5, 2: 3}
    assert [bracket_of(i, 3, 3) for i in range(4)] == [1, 0, 2, 0]


def test_a_later_bracket_is_judged_from_its_own_first_rung_among_every_trial_there():
    stop = EarlyStop(kind="hyperband", grace_epochs=3, reduction_factor=3, smooth_epochs=1, brackets=3)
    slow = {1: 0.1, 2: 0.1, 3: 0.1, 4: 0.5, 5: 0.6}  # last of four at epoch 3
    peers = trials(*(flat(v, 3) for v in (0.9, 0.8, 0.7)))
    assert judge(stop, slow, peers, 0, RUNGS, True, "acc").stop  # bracket 1: cut at epoch 3
    assert not judge(stop, slow, peers, 1, RUNGS, True, "acc").stop  # bracket 2: not judged before epoch 9
    at_9 = {**slow, **{e: 0.2 for e in range(6, 10)}}
    verdict = judge(stop, at_9, trials(*(flat(v, 9) for v in (0.9, 0.8, 0.7))), 1, RUNGS, True, "acc")
    assert verdict.stop and verdict.why == (
        "bracket 2 of 3 (judged from epoch 9), at epoch 9: acc 0.2 (best of its last 1) ranked 4 of the 4 trials "
        "that reached it; the best 1 go on (1 in 3): trial 1 (0.9)"
    )


def test_patience_stops_a_trial_whose_best_has_not_moved():
    stalled = {1: 0.5, 2: 0.6, 3: 0.7, 4: 0.69, 5: 0.7}  # the best before the last two was 0.7; no better since
    verdict = patience(stalled, grace=3, epochs=2, maximize=True, metric="acc")
    assert verdict.stop and verdict.why == "at epoch 5: acc has not bettered 0.7 in 2 epochs"
    assert not patience({**stalled, 5: 0.71}, 3, 2, True, "acc").stop
    assert not patience({1: 0.5, 2: 0.5}, 3, 2, True, "acc").stop  # within the grace


def test_synchronous_halving_runs_what_the_issue_says():
    # 16 trials, 300 epochs, rungs 3, 9, 27, 81, 243 at factor 3: 16 x 3 + 5 x 6 + 1 x 18 + 1 x 54
    # + 1 x 162 + 1 x 57 = 369 epochs of the 4,800 (0.08x)
    assert synchronous_epochs([16], 300, [3, 9, 27, 81, 243], 3) == 48 + 30 + 18 + 54 + 162 + 57 == 369


def test_synchronous_hyperband_judges_each_bracket_from_its_rung():
    # 8, 5, 3 trials in brackets 1-3 (rungs 3, 9, 27 of 300): 8 x 3; the best 2 and 5 new ones at 9
    # (2 x 6 + 5 x 9); the best 2 of 7 and 3 new at 27 (2 x 18 + 3 x 27); 5 // 3 = 1 on: 1 x 54,
    # 1 x 162, 1 x 57
    expected = 24 + (12 + 45) + (36 + 81) + 54 + 162 + 57
    assert synchronous_epochs([8, 5, 3], 300, [3, 9, 27, 81, 243], 3) == expected == 471
    sweep = stopped_by({"kind": "hyperband", "grace_epochs": 3, "reduction_factor": 3})
    assert synchronous_schedule(sweep, list(range(16)), 300) == 471
    # a bracket whose first rung lies past the trials' end runs them to the end, unjudged
    assert synchronous_epochs([0, 0, 2], 20, [3, 9], 3) == 40


def test_how_likely_a_pruned_trial_was_to_win_is_read_from_the_finished_curves():
    sweep = stopped_by({"kind": "successive_halving", "grace_epochs": 3, "smooth_epochs": 1})

    def result(key, status, curve):
        history = [{"epoch": e, "acc": v} for e, v in curve.items()]
        return TrialOutcome(key=key, index=0, status=status, history=history)

    ran = [
        # the winner stood at 0.6 at epoch 3 and ended at 0.95 (its last epochs 0.95: no noise)
        result("w", "ok", {1: 0.5, 2: 0.55, 3: 0.6, 4: 0.9, 5: 0.95}),
        result("a", "ok", {1: 0.7, 2: 0.75, 3: 0.8, 4: 0.85, 5: 0.9}),
        result("b", "ok", {1: 0.4, 2: 0.45, 3: 0.5, 4: 0.6, 5: 0.7}),
        # stopped at epoch 3 at 0.6: of the finished trials as low there (w at 0.6, b at 0.5), one won
        result("p", "pruned", {1: 0.5, 2: 0.55, 3: 0.6}),
    ]
    # the share's Wilson 95% interval by hand, p = 1/2, n = 2, z = 1.96: centre (0.5 + z^2/4) / (1 + z^2/2)
    # = 0.5; half-width z sqrt(0.25/2 + z^2/16) / (1 + z^2/2) = 1.96 x 0.60416 / 2.9208 = 0.40547
    won = could_have_won(sweep, ran)
    assert won.model_dump(exclude={"share_low", "share_high"}) == {
        "share": 0.5, "won": 1, "of": 2, "epoch": 3, "noise": 0.0, "pruned_told": 1, "pruned": 1
    }  # fmt: skip
    assert (won.share_low, won.share_high) == pytest.approx((0.5 - 0.40547, 0.5 + 0.40547), abs=1e-5)
    from gpuscout.report.sweep import stopping_lines

    said = EarlyStopSummary(kind="successive_halving", pruned=1, trial_hours_used=0.01, trial_hours_saved=0.01,
                            epochs_run=18, epochs_planned=20, epochs_synchronous=None, trial_start_s=0.0, epoch_s=1.0,
                            best_rank_at_rungs=[], pruned_could_win=won, finished=2, brackets=None)  # fmt: skip
    assert stopping_lines(said, None, "acc")[-1].endswith(
        "still ended within the winner's noise (acc +-0): 50% (95% CI 9%-91%)"
    )
    # one finished curve as low (issue 75: "100% (only 1 such curves...)"): a count, never a chance
    one = could_have_won(sweep, [ran[0], ran[3]])
    assert one.of == 1 and one.share is None and one.share_low is None
    line = stopping_lines(said.model_copy(update={"pruned_could_win": one}), None, "acc")[-1]
    assert line == (
        "a pruned trial's chance to have won cannot be told from one curve: the one finished trial that stood as "
        "low at epoch 3 still ended within the winner's noise (acc +-0)"
    )
    assert "%" not in line


def test_a_pruned_trials_time_is_start_up_and_epochs_apart():
    """Trials of 6 s of start-up and 0.05 s an epoch: pruned at epochs 3 and 9 (6.15 s, 6.45 s)
    and run to 300 (21 s). The line gives both back; a pruned trial's own seconds over epochs
    (2.05 s an epoch) would have counted 40x the time its unrun epochs take."""
    start_s, epoch_s = trial_pace([(3, 6.15), (9, 6.45), (300, 21.0)])
    assert (round(start_s, 6), round(epoch_s, 6)) == (6.0, 0.05)
    assert trial_pace([(300, 21.0), (300, 19.0)]) == (0.0, 40.0 / 600)


def test_a_trial_looks_for_its_verdict_often_at_first_then_less(tmp_path, monkeypatch):
    """The driver answers an epoch in about 0.3 ms: the trial looks again after 0.5 ms, then at
    doubling pauses up to 10 ms (a fixed 10 ms cost a third of a fast epoch), and takes the
    verdict when it is there."""
    from gpuscout.core import decisions

    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 7:  # the driver's verdict lands during the seventh pause
            decisions.write(tmp_path, "1-3", stop=True)

    monkeypatch.setenv(decisions.DECISIONS_ENV, str(tmp_path))
    monkeypatch.setattr(decisions.time, "sleep", sleep)
    assert decisions.wait_for("1-3") == "stop"
    assert pauses == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.01, 0.01]


def test_the_summary_says_what_each_bracket_held_and_the_schedule_it_is_measured_against():
    from gpuscout.report.sweep import stopping_lines
    from gpuscout.sweep.stopping import brackets

    sweep = stopped_by({"kind": "hyperband", "grace_epochs": 3, "reduction_factor": 3})
    held = brackets(sweep, list(range(16)))
    assert [b.model_dump() for b in held] == [
        {"trials": 8, "judged_from_epoch": 3},
        {"trials": 5, "judged_from_epoch": 9},
        {"trials": 3, "judged_from_epoch": 27},
    ]
    stopping = EarlyStopSummary(
        kind="hyperband", pruned=15, trial_hours_used=0.01, trial_hours_saved=0.01, epochs_run=796,
        epochs_planned=4800, epochs_synchronous=471, trial_start_s=0.0, epoch_s=1.0, best_rank_at_rungs=[],
        brackets=held, pruned_could_win=None, finished=1,
    )  # fmt: skip
    lines = stopping_lines(stopping, None, "acc")
    assert lines[0].endswith("796 of 4,800 epochs run (synchronous hyperband: 471)")
    assert lines[1] == (
        "brackets: 8 trials judged from epoch 3, 5 trials judged from epoch 9, 3 trials judged from epoch 27"
    )
    assert brackets(stopped_by({"kind": "median"}), [0, 1]) is None
    # no finished curve to read a pruned trial's chance from: said, not left out
    assert lines[-1] == (
        "a pruned trial's chance to have won cannot be told: the one trial that ran to the end did not stand as "
        "low as a pruned one where it was stopped"
    )


def test_the_best_trials_rank_is_given_at_rungs_even_where_the_rule_judges_every_epoch():
    from gpuscout.sweep.search import halving_rungs, rungs

    median_rule = stopped_by({"kind": "median", "grace_epochs": 6})
    assert rungs(median_rule, 70) == list(range(6, 71))  # judged every epoch from the grace
    assert halving_rungs(median_rule, 70) == [6, 18, 54]  # ranked as at halving's rungs, not 65 times
    assert halving_rungs(stopped_by({"kind": "successive_halving", "grace_epochs": 3}), 300) == [3, 9, 27, 81, 243]


def test_a_trial_that_reported_nan_and_infinity_leaves_the_summary_whole():
    """Issue 79, item 2: with successive halving, one trial printing NaN and Infinity values (some
    lines without a step) and another pruned, the sweep's summary ended in `TypeError: must be
    real number, not NoneType`. Every reader takes a curve's finite points alone (pruning.finite)."""
    from gpuscout.sweep.stopping import stopping_summary

    sweep = stopped_by({"kind": "successive_halving", "grace_epochs": 1, "smooth_epochs": 2})
    nan, inf = float("nan"), float("inf")
    wild = [{"epoch": 1, "acc": nan}, {"acc": inf}, {"epoch": 2, "acc": 0.4}, {"epoch": 3, "acc": inf}]
    ran = [
        TrialOutcome(key="w", index=0, status="ok", history=[{"epoch": e, "acc": 0.5 + e / 10} for e in (1, 2, 3)]),
        TrialOutcome(key="n", index=1, status="ok", history=wild, duration_s=3.0),
        TrialOutcome(key="p", index=2, status="pruned", history=[{"epoch": 1, "acc": 0.3}], duration_s=1.0),
        TrialOutcome(key="x", index=3, status="pruned", history=[{"epoch": 1, "acc": nan}], duration_s=1.0),
    ]
    summary = stopping_summary(sweep, ran, ran[0])
    assert summary.pruned == 2 and summary.epochs_run == 3 + 3 + 1 + 1  # the step-less line is no epoch
    won = summary.pruned_could_win  # p stood at 0.3 at epoch 1; n, whose only finite point is 0.4, stood higher
    assert won is None or (won.of >= 1 and won.epoch == 1)
    assert pruning.finite({1: nan, 2: None, 3: "0.5", 4: 0.7, 5: inf}) == {4: 0.7}
    assert pruning.smoothed({1: nan, 2: 0.4, 3: inf}, 3, 2, True) == 0.4


def test_the_dry_runs_plan_counts_each_rung_as_the_synchronous_schedule_does():
    """issue 78: --dry-run tells at which epochs trials are judged and how many go on. By hand:
    16 trials at factor 3 from a grace of 3: 16 reach epoch 3, 16 // 3 = 5 go on; 5 reach epoch 9,
    one goes on and runs to the end; hyperband's brackets of 8, 5 and 3 join at 3, 9 and 27: 8 -> 2,
    2 + 5 = 7 -> 2, 2 + 3 = 5 -> 1 (the schedule test_synchronous_hyperband_... counts 471 epochs of)."""
    from gpuscout.report.sweep import stop_plan_lines
    from gpuscout.sweep import stop_plan

    halving = EarlyStop(kind="successive_halving", grace_epochs=3, reduction_factor=3)
    sixteen = list(range(16))
    planned = stop_plan.plan(halving, sixteen, [{"lr": 1, "epochs": 300}] * 16, "acc")
    assert [(r.epoch, r.reach, r.go_on) for r in planned.rungs] == [(3, 16, 5), (9, 5, 1), (27, 1, 1)]
    assert planned.epochs == 300 and not planned.more_rungs
    lines = stop_plan_lines(planned)
    assert lines[1:4] == [
        "  epoch  3: 16 trials reach it, the best 5 go on",
        "  epoch  9: 5 trials reach it, the best one goes on",
        "  epoch 27: 1 trial reaches it, it runs to the end (epoch 300)",
    ]
    band = stop_plan.plan(EarlyStop(kind="hyperband", grace_epochs=3), sixteen, [{}] * 16, "acc")
    assert [len(b.trials) for b in band.brackets] == [8, 5, 3]
    assert sorted(i for b in band.brackets for i in b.trials) == sixteen
    assert all(bracket_of(i, 3, 3) == b.bracket - 1 for b in band.brackets for i in b.trials)
    assert [(r.epoch, r.reach, r.go_on, r.joining) for r in band.rungs] == [
        (3, 8, 2, 0),
        (9, 7, 2, 5),
        (27, 5, 1, 3),
        (81, 1, 1, 0),
    ]
    assert "  epoch  9: 7 trials judged (5 of them for the first time), the best 2 go on" in stop_plan_lines(band)
    # two trials: a rung reached by fewer than the factor judges no one, and no later one will: they
    # run to the end, said once
    two = stop_plan.plan(halving, [0, 1], [{"lr": 1}, {"lr": 2}], "acc")
    assert [(r.reach, r.go_on) for r in two.rungs] == [(2, 2)] and not two.more_rungs and two.epochs is None
    said = "  epoch 3: 2 trials reach it, too few to judge (fewer than 3): they run to the end"
    assert stop_plan_lines(two)[1] == said
    # no epochs known and enough trials: LISTED_RUNGS rungs at most, and said to go on
    many = stop_plan.plan(halving, list(range(300)), [{}] * 300, "acc")
    assert [r.reach for r in many.rungs] == [300, 100, 33, 11, 3] and many.more_rungs
    # patience judges from past its patience; the median from the grace, at every epoch
    patient = stop_plan.plan(EarlyStop(kind="patience", patience_epochs=4), [0, 1], [{"epochs": 27}] * 2, "acc")
    assert patient.first_judged_epoch == 5 and not patient.rungs
    assert stop_plan_lines(patient)[1] == "  first judged at epoch 5 of 27"
    middle = stop_plan.plan(EarlyStop(kind="median", grace_epochs=2), [0, 1, 2], [{}] * 3, "acc")
    assert middle.first_judged_epoch == 2 and "from epoch 2 on" in middle.rule
