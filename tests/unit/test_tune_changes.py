"""The kinds of change tune makes, one module each behind one base (tune/changes/, issue 76): the
registry is what the planner, the patch, the dry run's rules and --only/--skip read, so a kind
added there is planned, written into the patch and named everywhere without a line elsewhere."""

import ast
import importlib
from pathlib import Path

import pytest

from gpuscout.tune import changes, script
from gpuscout.tune import patch as patches
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, original, site
from gpuscout.tune.source_edits import NotLocated, call_at, set_keywords
from tests.records import fit_events, make_watch_record
from tests.unit.test_tune_patch import SCRIPT
from tests.unit.test_tune_patch import baseline as patch_baseline

CHANGES_DIR = Path(changes.__file__).parent


def test_every_knob_is_a_module_of_its_own_and_every_module_a_knob():
    stems = [p.stem for p in CHANGES_DIR.glob("*.py") if p.stem not in ("__init__", "base")]
    modules = {stem: importlib.import_module(f"gpuscout.tune.changes.{stem}") for stem in stems}
    assert sorted(stem for stem, m in modules.items() if hasattr(m, "KIND")) == sorted(changes.CHANGES)
    # the one helper beside the kinds: a larger batch's memory, factors and rate, which batch_size
    # and data_parallel (its batch times the devices) share
    assert {stem for stem, m in modules.items() if not hasattr(m, "KIND")} == {"larger_batch"}
    # found, not listed by hand: each kind says its place in a plan, one place each
    places = [k.listed for k in changes.KINDS.values()]
    assert places == sorted(places) and len(set(places)) == len(places)
    for name in changes.CHANGES:
        kind = importlib.import_module(f"gpuscout.tune.changes.{name}").KIND
        assert isinstance(kind, ChangeKind) and kind.name == name and changes.kind(name) is kind
        assert kind.rule and type(kind).plan is not ChangeKind.plan and type(kind).edits is not ChangeKind.edits
    # the dry run's rules are the kinds' own: none left out (the table had drifted to 8 of 10)
    assert [r.change for r in script.dry_run("python x.py", None, (), ()).rules] == list(changes.CHANGES)
    assert changes.INPUT_FIRST == (
        "cache",
        "device_batches",
        "augment_in_model",
        "augment_inline",
        "augment_map",
        "workers",
        "process_workers",
        "prefetch",
    )


def test_no_module_outside_tune_changes_names_a_knob_in_an_if_chain():
    """The patch dispatches on the kind, not on its name (tune/patch.py's 95-line if-chain)."""
    tree = ast.parse((CHANGES_DIR.parent / "patch.py").read_text())
    compared = [
        c.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for c in node.comparators
        if isinstance(c, ast.Constant) and c.value in changes.CHANGES
    ]
    assert compared == []


class Seeded(ChangeKind):
    """A kind the project does not have: compile with a fixed seed generator, for the test."""

    name = "seeded"
    rule = "always, for the test"

    def plan(self, baseline, script_batch):
        return [Change("seeded", self.name, {"seeded": True}, "model.compile(..., seed=0)", "the test asks")]

    def edits(self, change, where):
        path, line = site(where.sites, "compile", where.root, "compiled the model")
        text = original(path, where.originals)
        return [(path, set_keywords(text, call_at(text, line, "compile"), {"seed": "0"}))]


def test_a_kind_added_to_the_registry_is_planned_checked_and_patched(tmp_path, monkeypatch):
    monkeypatch.setitem(changes.KINDS, "seeded", Seeded())
    monkeypatch.setattr(script, "CHANGES", (*changes.CHANGES, "seeded"))
    script.check_names(("seeded",), "--only")
    planned = script.plan(make_watch_record(events=fit_events()), only=("seeded",))
    assert [c.name for c in planned.changes] == ["seeded"] and planned.skipped == []
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    made = patches.make(planned.changes, patch_baseline(path), tmp_path)
    assert made.located == ["seeded"] and '"mse", jit_compile=False, seed=0)' in made.texts[path.resolve()][1]


def test_a_kind_that_cannot_write_its_patch_says_so_and_leaves_the_others(tmp_path):
    class Unwritten(Seeded):
        def edits(self, change, where):
            return ChangeKind.edits(self, change, where)

    with pytest.raises(NotLocated, match="seeded is not written by a patch yet"):
        Unwritten().edits(Change("seeded", "seeded", {}, "", ""), None)


def test_every_change_has_its_applier_in_the_child_and_each_applier_a_hook_order():
    """The other side of the process boundary: child/applies/NAME.py for each knob, each called
    at one hook at least (its settings decide whether it does anything)."""
    from gpuscout.child import applies

    folder = Path(applies.__file__).parent
    assert sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "call")) == sorted(changes.CHANGES)
    hooked = {m.__name__.rsplit(".", 1)[1] for m in (*applies.ON_KERAS, *applies.COMPILE, *applies.FIT)}
    assert hooked == set(changes.CHANGES)
    # found, not listed: each says its place (ORDER), one place each, and every hook runs them in it
    orders = [m.ORDER for m in applies.APPLIERS]
    assert len(set(orders)) == len(orders) and orders == sorted(orders) and len(orders) == len(changes.CHANGES)
    for hook in (applies.ON_KERAS, applies.COMPILE, applies.FIT):
        assert [m.ORDER for m in hook] == sorted(m.ORDER for m in hook)
    for module in applies.ON_KERAS:
        assert callable(module.on_keras)
    for module in applies.COMPILE:
        assert callable(module.compile_kwargs)
    for module in applies.FIT:
        assert callable(module.fit_input)


def test_the_appliers_change_one_fit_call_in_the_hooks_order(monkeypatch):
    """A larger batch is set before the arrays are cut into device slices; a cache before read-
    ahead, which then reads the cached stream; a plain run's settings change nothing."""
    from gpuscout.child import tune_overrides, tune_state
    from gpuscout.core.tune_settings import TuneSettings

    def stream():
        while True:
            yield 1

    monkeypatch.setattr(tune_state, "SETTINGS", TuneSettings())
    source = stream()
    assert tune_overrides.fit_input((source,), {"epochs": 2}) == ((source,), {"epochs": 2})
    monkeypatch.setattr(tune_state, "SETTINGS", TuneSettings(cache=True, period=4, prefetch=True, batch_size=128))
    (fed,), kwargs = tune_overrides.fit_input((source,), {"epochs": 2})
    assert kwargs == {"epochs": 2, "batch_size": 128}
    assert [next(fed) for _ in range(3)] == [1, 1, 1]
    # read ahead (fixes.read_ahead) of the cached stream (fixes.replayed), not the other way round
    assert fed.gi_code.co_name == "read_ahead" and fed.gi_frame.f_locals["batches"].gi_code.co_name == "replayed"


def test_a_run_whose_step_was_not_timed_gets_a_reason_not_a_crash():
    """What mypy found (issue 76): steps_per_execution formatted a step time that can be None."""
    from gpuscout.tune.changes import steps_per_execution

    r = make_watch_record(events=fit_events(outside_s=0.0, wait_s=0.0))
    untimed = r.model_copy(update={"step_time_s": None, "outside_step_share": 0.0, "verdict": []})
    assert steps_per_execution.steps_per_execution(untimed) == "the step's time was not seen"
