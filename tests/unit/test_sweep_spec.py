import pytest

from gpuscout.core.errors import UsageError
from gpuscout.sweep.expansion import expand, trial_key
from gpuscout.sweep.spec import SweepFile


def sweep(**fields):
    base = {
        "name": "s",
        "command": "run {a} {b}",
        "reports": ["m"],
        "metric": {"name": "m"},
        "space": {"a": [1, 2, 3], "b": ["x", "y"]},
    }
    return SweepFile(**{**base, **fields})


def test_a_grid_is_the_product_in_order():
    trials = expand(sweep())
    assert [t.params for t in trials][:3] == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}]
    assert len(trials) == 6 and [t.index for t in trials] == list(range(6))


def test_random_search_is_seeded_and_respects_ranges():
    s = sweep(
        space={"a": {"loguniform": [1e-4, 1e-1]}, "b": {"int": [2, 5]}},
        strategy={"kind": "random", "trials": 50, "seed": 7},
    )
    first, again = expand(s), expand(s)
    assert [t.params for t in first] == [t.params for t in again]
    assert all(1e-4 <= t.params["a"] <= 1e-1 and 2 <= t.params["b"] <= 5 for t in first)
    other = expand(sweep(space=s.space, strategy={"kind": "random", "trials": 50, "seed": 8}))
    assert [t.params for t in other] != [t.params for t in first]


def test_trial_keys_follow_parameters_not_order():
    s = sweep()
    assert trial_key(s, {"a": 1, "b": "x"}) == trial_key(s, {"b": "x", "a": 1})
    assert trial_key(s, {"a": 1, "b": "x"}) != trial_key(sweep(name="other"), {"a": 1, "b": "x"})


def test_a_grid_over_a_range_is_refused():
    with pytest.raises(UsageError, match="a grid needs lists"):
        expand(sweep(space={"a": {"uniform": [0, 1]}, "b": [1]}))


def test_repeated_random_draws_of_lists_are_run_once():
    trials = expand(sweep(space={"a": [1, 2], "b": ["x"]}, strategy={"kind": "random", "trials": 20}))
    assert sorted(t.params["a"] for t in trials) == [1, 2]


def test_idle_time_splits_into_gaps_between_trials_and_the_drain_at_the_end(tmp_path):
    """Two GPUs over 0-100 s: GPU 0 waits 2 s between its trials and ends at 100; GPU 1 has no
    trial left after 70 s. Idle = gap + drain, as shares of the 100 s wall."""
    from types import SimpleNamespace

    from gpuscout.record.trial import TrialOutcome
    from gpuscout.sweep.resume_plan import Plan
    from gpuscout.sweep.summary import summarise

    def trial(i, gpu, start, end):
        return TrialOutcome(
            **{
                "key": f"k{i}",
                "index": i,
                "params": {"a": i},
                "status": "ok",
                "metrics": {"m": float(i)},
                "gpu_index": gpu,
                "started_monotonic_s": start,
                "ended_monotonic_s": end,
                "duration_s": end - start,
                "slot": f"gpu{gpu}",
                "log_dir": "x",
            }
        )

    new = [trial(0, 0, 0.0, 49.0), trial(1, 0, 51.0, 100.0), trial(2, 1, 0.0, 30.0), trial(3, 1, 30.0, 70.0)]
    plan = Plan(sweep(), "h", [], [], [], [], tmp_path, tmp_path / "xla-cache")
    summary = summarise(plan, new, new, SimpleNamespace(available=False), None)
    assert summary.wall_s == 100.0
    assert summary.gpu_idle_share == pytest.approx({"gpu0": 0.02, "gpu1": 0.30})
    assert summary.gpu_gap_share == pytest.approx({"gpu0": 0.02, "gpu1": 0.0})
    assert summary.gpu_drain_share == pytest.approx({"gpu0": 0.0, "gpu1": 0.30})
    assert summary.trials_per_hour == pytest.approx(4 / 100 * 3600)
    assert summary.parallel_speedup == pytest.approx(168 / 100)


def test_commands_are_templates_whose_values_are_one_word_each():
    from gpuscout.sweep.expansion import argv_for

    s = sweep(command="python train.py --lr {a:.1e} --name {b}")
    assert argv_for(s, {"a": 0.001, "b": "two words"}) == [
        "python",
        "train.py",
        "--lr",
        "1.0e-03",
        "--name",
        "two words",
    ]


def test_shell_syntax_runs_under_sh_and_braces_are_escaped_by_doubling():
    from gpuscout.sweep.expansion import argv_for, uses_shell

    piped = sweep(command="X={a} python train.py {b} | tee log-${{HOME}}")
    assert uses_shell(piped)
    assert argv_for(piped, {"a": 1, "b": "y z"}) == ["/bin/sh", "-c", "X=1 python train.py 'y z' | tee log-${HOME}"]
    # a `$` or `|` inside a value does not make the command a shell line: values are quoted
    assert not uses_shell(sweep(command="python train.py {a} {b}"))
    assert uses_shell(sweep(command="python train.py {a} {b}", shell=True))
    assert not uses_shell(sweep(command="X=1 python t.py {a} {b}", shell=False))


@pytest.mark.parametrize(
    "command, space, fragment",
    [
        ("run {a:d} {b}", {"a": [1.5], "b": ["x"]}, "trial 0"),  # an integer format given a float
        ("run '{a} {b}", {"a": [1], "b": ["x"]}, "No closing quotation"),
    ],
)
def test_a_command_no_trial_can_make_is_refused_before_anything_runs(tmp_path, command, space, fragment):
    from gpuscout.sweep.expansion import check_commands

    s = sweep(command=command, space=space, shell=False)
    with pytest.raises(UsageError, match=fragment):
        check_commands(s, expand(s), tmp_path / "s.yaml")


def test_the_compilation_cache_is_the_stores_for_jax_runs_and_can_be_turned_off(tmp_path, monkeypatch):
    from gpuscout.core.spec import build_spec
    from gpuscout.sweep import resume_plan, runner, workload_trials

    on = SweepFile(name="c", workload="mlp", metric={"name": "mfu"}, space={"batch_size": [8]})
    off = on.model_copy(update={"compilation_cache": False})
    # every sweep of a store shares one, beside the store; a log folder the user named has its own
    store = tmp_path / "results.sqlite"
    shared = resume_plan.cache_folder(store, resume_plan.logs_folder(store, "c"), named=False)
    assert shared == resume_plan.cache_folder(store, resume_plan.logs_folder(store, "d"), named=False)
    assert shared == tmp_path / "sweeps" / ".xla-cache"
    assert resume_plan.cache_folder(store, tmp_path / "mine", named=True) == tmp_path / "mine" / "xla-cache"
    assert runner.TrialRunner(on, tmp_path, cache=shared).cache == shared
    assert runner.TrialRunner(off, tmp_path, cache=shared).cache is None
    jax_run = build_spec(workload="mlp", backend="jax", batch_size=8)
    tf_run = build_spec(workload="mlp", backend="tensorflow", batch_size=8)
    assert workload_trials.on_slot(jax_run, 1, tmp_path / "x").compilation_cache == str(tmp_path / "x")
    assert workload_trials.on_slot(jax_run, 1, None).compilation_cache is None
    assert workload_trials.on_slot(tf_run, 1, tmp_path / "x").compilation_cache is None  # jax's cache only
    with pytest.raises(UsageError, match="compilation cache is jax's"):
        build_spec(workload="mlp", backend="tensorflow", batch_size=8, compilation_cache="/tmp/c")
    # a command trial's script finds it in jax's own variable, unless the user set one
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    slot = runner.Slot("cpu0", None)
    env = runner.trial_env(slot, tmp_path / "r", {}, tmp_path / "x")
    assert (
        env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "x")
        and env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    )
    assert "JAX_COMPILATION_CACHE_DIR" not in runner.trial_env(slot, tmp_path / "r", {}, None)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/mine")
    assert runner.trial_env(slot, tmp_path / "r", {}, tmp_path / "x")["JAX_COMPILATION_CACHE_DIR"] == "/mine"


def test_early_stop_and_tpe_are_validated_before_anything_runs(tmp_path, monkeypatch):
    from pydantic import ValidationError

    from gpuscout.sweep import resume_plan, search
    from gpuscout.sweep.spec import load

    with pytest.raises(ValidationError, match="successive_halving"):
        sweep(early_stop={"kind": "asha"})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        sweep(early_stop={"kind": "median", "grace_epochs": 0})
    # a setting its rule does not read is refused, not ignored
    with pytest.raises(ValidationError, match=r"kind median does not use brackets \(brackets is for hyperband\)"):
        sweep(early_stop={"kind": "median", "brackets": 2})
    with pytest.raises(ValidationError, match="does not use reduction_factor, smooth_epochs"):
        sweep(early_stop={"kind": "optuna_median", "reduction_factor": 2, "smooth_epochs": 2})
    assert sweep(early_stop={"kind": "hyperband", "brackets": 2, "smooth_epochs": 1}).early_stop.brackets == 2
    with pytest.raises(ValidationError, match="a tpe search needs `trials: N`"):
        sweep(strategy={"kind": "tpe"})
    with pytest.raises(UsageError, match="tpe has nothing to search"):
        expand(sweep(space={"a": [1], "b": ["x"]}, strategy={"kind": "tpe", "trials": 4}))
    assert expand(sweep(strategy={"kind": "tpe", "trials": 4})) == []  # proposed one by one as results come
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "name: w\nworkload: mlp\nmetric: {name: samples_per_s}\nspace: {batch_size: [8, 16]}\n"
        "early_stop: {kind: median}\n"
    )
    with pytest.raises(UsageError, match="line 5: early_stop needs the metric each epoch"):
        load(workload)
    command = tmp_path / "c.yaml"
    command.write_text(
        "name: c\ncommand: run {a}\nreports: [m]\nmetric: {name: m}\nspace: {a: [1, 2]}\nearly_stop: {kind: median}\n"
    )
    monkeypatch.setitem(__import__("sys").modules, "optuna", None)  # Optuna not installed
    with pytest.raises(UsageError, match=r"use Optuna, which is not installed: pip install 'gpuscout\[sweep\]'"):
        resume_plan.check(command, resume_plan.SweepOptions(cpu_slots=1), None)
    with pytest.raises(UsageError, match="use Optuna"):
        search.Search(load(command)[0], tmp_path)


def test_the_space_becomes_optunas_distributions():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from gpuscout.sweep.search import distributions, rungs

    s = sweep(
        command="run {a} {b} {c} {d}",
        space={"a": [1, 2], "b": {"uniform": [0, 1]}, "c": {"loguniform": [1e-4, 1e-1]}, "d": {"int": [2, 5]}},
    )
    d = distributions(s)
    assert d["a"] == CategoricalDistribution([1, 2]) and d["b"] == FloatDistribution(0.0, 1.0)
    assert d["c"] == FloatDistribution(1e-4, 1e-1, log=True) and d["d"] == IntDistribution(2, 5)
    halving = sweep(early_stop={"kind": "successive_halving", "grace_epochs": 2, "reduction_factor": 3})
    assert rungs(halving, 20) == [2, 6, 18]  # grace x factor^k
    assert rungs(sweep(early_stop={"kind": "median", "grace_epochs": 3}), 5) == [3, 4, 5]


def test_a_dry_runs_first_tpe_proposals_are_the_ones_the_sweep_starts_with(tmp_path):
    """search.first_proposals asks a study like the sweep's own (TPE, its seed) before any result:
    the trials a new tpe sweep starts first, one a slot, keys included."""
    from gpuscout.sweep import search

    sweep = SweepFile.model_validate(
        {
            "name": "t",
            "command": "run {lr} {units}",
            "metric": {"name": "acc"},
            "space": {"lr": {"loguniform": [1e-4, 1e-1]}, "units": {"int": [16, 256]}},
            "strategy": {"kind": "tpe", "trials": 10, "seed": 7},
        }
    )
    shown = search.first_proposals(sweep, 3)
    real = search.Search(sweep, tmp_path / "logs")
    started = [real.propose(i) for i in range(3)]
    assert [(t.key, t.params) for t in shown] == [(t.key, t.params) for t in started]
    assert len({t.key for t in shown}) == 3 and all(16 <= t.params["units"] <= 256 for t in shown)
    assert (
        len(
            search.first_proposals(
                sweep.model_copy(update={"strategy": sweep.strategy.model_copy(update={"trials": 2})}), 3
            )
        )
        == 2
    )  # never more than the sweep's trials


def test_a_trials_timeout_takes_the_duration_grammar_and_a_bare_number_stays_seconds():
    """Issue 78: `timeout_s: 30m` in a sweep file is 1800 seconds, as --timeout 30m is; 3600 stays 3600;
    a malformed duration is refused naming the field."""
    from pydantic import ValidationError

    assert sweep(timeout_s="30m").timeout_s == 1800
    assert sweep(timeout_s="1h30m").timeout_s == 5400
    assert sweep(timeout_s=3600).timeout_s == 3600
    with pytest.raises(ValidationError, match="timeout_s must be a duration like 20s, 6m, 1.5h or 3d"):
        sweep(timeout_s="half an hour")
