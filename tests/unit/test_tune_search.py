"""tune's search (tune/search.py) on records made by hand: rounds that keep the fastest change and
try the rest on top of it, every candidate against the reference runs beside it, and leaders
measured again when those disagree. No process runs: `run` returns a record of the rate asked."""

import itertools

from gpuscout.tune import script, search
from gpuscout.tune.script import Change, Plan
from tests.records import fit_events, make_watch_record

ids = itertools.count()
BATCH = 64


def record(rate: float, jitter: float = 0.01):
    """A run whose 6 windows ran at `rate` samples/s, give or take `jitter` (alternating)."""
    events = fit_events(windows=6, batch=BATCH, wait_s=0.0)
    seconds = [BATCH * 50 / (rate * (1 + jitter * (-1) ** i * (1 + i % 3) / 3)) for i in range(6)]
    at = 1000.0
    for event in events:
        if event["event"] == "watch_window":
            event["start_monotonic_s"], at = at, at + seconds[event["index"]]
            event["end_monotonic_s"] = at
    return make_watch_record(f"run{next(ids):04d}", events, status="stopped")


CACHE = Change("cache", "cache", {"cache": True}, "model.fit(CachedBatches(dataset), ...)", "repeats")
MIXED = Change("mixed_precision", "mixed_precision", {"mixed_precision": "mixed_bfloat16"}, "policy", "tensor cores")
SPE = Change("steps_per_execution_8", "steps_per_execution", {"steps_per_execution": 8}, "spe", "short steps")


def plan_all(facts, kept):
    return Plan(changes=[c for c in (CACHE, MIXED, SPE) if c.knob not in kept])


def test_a_change_that_pays_only_after_another_is_found_in_the_second_round():
    """The input caps the step at 1,000 samples/s; cache lifts it to 3,000, where the model's own
    1,800 (float32) or 3,000 (mixed) is the limit: mixed precision buys nothing in round 1 and
    1.6x on top of the cache in round 2; steps_per_execution nothing anywhere."""
    ran = []

    def run(config, name):
        s = config.settings
        rate = min(3000.0 if "cache" in s else 1000.0, 3000.0 if "mixed_precision" in s else 1800.0)
        ran.append(config.name)
        return record(rate)

    probe = record(1000.0)
    found = search.search(run, plan_all, probe, search.Budget(3600), reserve=3)
    assert [t.change.name for t in found.path] == ["cache", "mixed_precision"]
    assert found.rounds == 3  # the third tried steps_per_execution on top of both: nothing
    first = {t.change.name: t.row for t in found.trials if t.round == 1}
    assert first["cache"]["verdict"] == "faster" and first["cache"]["kept"]
    assert first["mixed_precision"]["verdict"] == "no significant difference"
    second = next(t.row for t in found.trials if t.round == 2 and t.change is MIXED)
    assert second["on"] == "cache" and second["setting"] == "cache+mixed_precision"
    assert abs(second["ratio"] - 3000 / 1800) < 0.05
    # interleaved: 3 candidates, then the reference again; each judged against the two beside it
    assert ran[:4] == ["cache", "mixed_precision", "steps_per_execution_8", "baseline"]
    assert len(first["cache"]["reference_run_ids"]) == 2 and first["cache"]["reference_run_ids"][0] == probe.id
    assert found.best.name == "cache+mixed_precision"


def test_a_noisy_reference_has_the_leaders_measured_again():
    """The reference runs beside round 1 disagree (1,000 then 1,400: the host was busy); the
    leading candidate is run again with the reference after it, and judged on all of them."""
    references = iter([1400.0, 1000.0, 1000.0, 1000.0, 1000.0])

    def run(config, name):
        if not config.changes:
            return record(next(references))
        return record(1500.0 if config.knobs == {"cache"} else 1005.0)

    found = search.search(run, lambda f, k: Plan(changes=[CACHE, SPE] if not k else []), record(1000.0),
                          search.Budget(3600), reserve=0)
    cache = next(t for t in found.trials if t.change is CACHE)
    assert cache.row["noisy"] and "apart" in cache.row["noisy"]
    assert cache.row.get("remeasured") and len(cache.runs) == 2 and len(cache.beside) == 3
    assert cache.row["verdict"] == "faster" and [t.change for t in found.path] == [CACHE]


def test_the_budget_stops_the_search_and_says_what_was_left():
    def run(config, name):
        budget.started -= 10.0  # each run takes 10 s
        return record(1000.0)

    budget = search.Budget(25.0)  # a run is taken to last as long as the longest so far (10 s): two runs fit
    probe = record(1000.0)
    budget.seen(probe)
    found = search.search(run, plan_all, probe, budget, reserve=0)
    assert len(found.trials) == 1 and not found.path
    assert [s.reason for s in found.skipped][-2:] == ["mixed_precision: the --budget was spent",
                                                      "steps_per_execution_8: the --budget was spent"]


def test_judged_pools_each_side():
    """Two runs of a change at 2,000 against two reference runs at 1,000: 2x, from 12 windows a side."""
    row = script.judged(CACHE, [record(2000.0), record(2000.0)], [record(1000.0), record(1000.0)], BATCH)
    assert abs(row["ratio"] - 2.0) < 0.03 and row["verdict"] == "faster" and row["healthy"]


def test_what_is_left_after_the_cache_is_not_more_workers():
    """After the cache is kept no batch is made any more: the sentence never asks for workers."""
    from gpuscout.tune import finale
    from tests.records import fit_events, make_watch_record

    cached = make_watch_record(events=fit_events(input_type="PyDataset", wait_s=0.4))  # 40% waiting
    said = finale.left(cached, cached, kept={"cache"})
    assert said.startswith("the best setting still waits on input 40% of the time: a fix there could buy at most "
                           "1.67x more") and "the batches are kept" in said and "worker" not in said
    assert "worker processes" in finale.left(cached, cached, kept=set())  # threads under the GIL: processes


def test_the_final_block_is_kept_back_only_once_a_change_wins():
    """Runs of 10 s and a budget of 45 s: with the whole final block (3 runs) kept back from the
    start no candidate would run (0 + (2 + 3) x 10 > 45); keeping back the closing baseline alone,
    the first candidate and its reference run (0 + (2 + 1) x 10 <= 45). Once a candidate has run and
    waits for its verdict (it may win), the block: no second candidate eats into it."""
    def run(config, name):
        budget.started -= 10.0
        return record(2000.0 if config.changes else 1000.0)

    budget = search.Budget(45.0)
    probe = record(1000.0)
    budget.seen(probe)
    found = search.search(run, plan_all, probe, budget, reserve=3)
    # cache ran; mixed precision would have run before cache's verdict, into the block it may need
    assert [t.change.name for t in found.trials] == ["cache"]
    assert [t.change.name for t in found.path] == ["cache"]
    spent = [s.reason for s in found.skipped]
    assert "mixed_precision: the --budget was spent" in spent and "steps_per_execution_8: the --budget was spent" in spent
    # the final block has no room: round 1's judgement against the baselines beside it stands
    from gpuscout.tune import finale

    class Session:
        patch = None

    final = finale.measure(run, found, Session(), budget)
    assert final.best is None and final.before is found.path[0].beside[-1]
