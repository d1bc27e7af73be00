"""A stored run belongs to a script by its file, never by the command's words (issue 86, item 4):
in a second folder whose train.py is another file, `tune --dry-run` planned from the first folder's
stored watch of `python train.py`, and the budget check priced the session by that other script's
59 s run. The runs are stored by hand here; the CLI is the real one."""

import hashlib
import sys

from gpuscout.measure.command import ScriptIdentity, resolve
from gpuscout.store import Store
from tests.conftest import run_cli
from tests.records import fit_events, make_watch_record

TRAIN = "import keras\nprint('train')\n"


def stored_watch(store, folder, text: str, duration_s: float = 59.0):
    """A watch of `python train.py` run in `folder` when train.py held `text`."""
    record = make_watch_record(
        f"watch{abs(hash((str(folder), text))) % 10**8:08d}",
        fit_events(),
        cwd=str(folder),
        script_sha256=hashlib.sha256(text.encode()).hexdigest(),
    ).model_copy(update={"duration_s": duration_s})
    with Store(store) as s:
        s.keep([record])
    return record


def test_a_run_is_this_script_s_by_its_resolved_file_and_its_bytes(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, text in ((first, TRAIN), (second, "print('another')\n")):
        folder.mkdir()
        (folder / "train.py").write_text(text)
    monkeypatch.chdir(first)  # resolve checks the script is there
    command = resolve(["python", "train.py"])
    digest = hashlib.sha256(TRAIN.encode()).hexdigest()
    assert ScriptIdentity.of(command, first).ran(["python", "train.py"], str(first), digest)
    assert not ScriptIdentity.of(command, second).ran(["python", "train.py"], str(first), digest)  # another file
    assert not ScriptIdentity.of(command, first).ran(
        ["python", "train.py", "--fast"], str(first), digest
    )  # its arguments
    assert not ScriptIdentity.of(command, first).ran(["python", "train.py"], str(first), None)  # stored before digests
    (first / "train.py").write_text(TRAIN + "# edited\n")
    assert not ScriptIdentity.of(command, first).ran(
        ["python", "train.py"], str(first), digest
    )  # the file since edited
    # a script named by its full path is the same file from any folder
    full = resolve(["python", str(second / "train.py")])
    there = hashlib.sha256(b"print('another')\n").hexdigest()
    assert ScriptIdentity.of(full, first).ran(full.given, str(second), there)


def test_another_folder_s_train_py_is_not_planned_from_nor_priced_by_this_one_s_runs(tmp_path):
    store = tmp_path / "runs.db"
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, text in ((first, TRAIN), (second, "print('another')\n")):
        folder.mkdir()
        (folder / "train.py").write_text(text)
    ran = stored_watch(store, first, TRAIN)
    here = run_cli("tune", "--dry-run", "--store", str(store), "--", "python", "train.py", cwd=first)
    assert here.returncode == 0 and f"from the stored watch {ran.id}" in here.stdout, here.stdout + here.stderr
    there = run_cli("tune", "--dry-run", "--store", str(store), "--", "python", "train.py", cwd=second)
    assert there.returncode == 0 and "no stored watch of `python train.py`" in there.stdout, there.stdout
    # the budget is priced by this script's runs only: the other folder's 59 s run refuses nothing here
    priced = run_cli(
        "tune", "--budget-minutes", "1", "--store", str(store), "--", "python", "train.py", cwd=second, timeout=300
    )  # it runs: the other train.py calls no fit, which is its own finding (exit 1)
    assert priced.returncode == 1 and "called no Model.fit" in priced.stderr, priced.stderr
    refused = run_cli(
        "tune", "--budget-minutes", "1", "--store", str(store), "--", "python", "train.py", cwd=first, timeout=120
    )
    assert refused.returncode == 2 and "a run of this command took 59 s" in refused.stderr, refused.stderr


def test_a_patch_path_that_leads_to_the_script_is_refused_whatever_link_leads_there(tmp_path):
    """Issue 87, item 1: `--patch link.patch --force`, link.patch a symbolic link to the script being
    tuned, wrote the diff over the script and said "(your files are unchanged)". The path is judged
    by the file it reaches: refused in one line, exit 2, the script untouched, nothing run."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    link = tmp_path / "link.patch"
    link.symlink_to(script)
    plain = tmp_path / "trainer"  # a script whose name has no .py: still the script tune runs
    plain.write_text(TRAIN)
    (tmp_path / "plain.patch").symlink_to(plain)
    for target, patch in ((script, link), (plain, tmp_path / "plain.patch")):
        done = run_cli(
            "tune", "--patch", str(patch), "--force", "--store", str(tmp_path / "s.db"), "--", "python", str(target),
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 2 and "through a link" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and target.read_text() == TRAIN
    assert not (tmp_path / "s.db").exists()


def test_tune_s_settings_left_in_the_environment_never_reach_a_plain_watch(tmp_path):
    """Issue 87, item 2: GPUSCOUT_TUNE kept by a shell switched a plain watch's measuring off (exit 0,
    'called no Model.fit') or crashed it ({"batch_size": -5}: a traceback of ours, nothing stored).
    gpuscout sets and clears its instrumentation's variables itself: the watch measures as ever and
    says in one note that it ignored the variable."""
    import json

    from tests.cli_checks import QUIET_TF
    from tests.conftest import FIXTURES

    store = tmp_path / "s.db"
    for value in ('{"batch_size": -5}', "not json", '{"jit_compile": true}'):
        done = run_cli(
            "watch", "--json", "--steps", "20", "--store", str(store), "--",
            sys.executable, str(FIXTURES / "watch" / "tune_me.py"), "ordered",
            env={"GPUSCOUT_TUNE": value, "GPUSCOUT_WATCH_STEPS": "3", "KERAS_BACKEND": "jax", **QUIET_TF},
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        (run,) = json.loads(done.stdout)["runs"]
        assert run["fits"][0]["steps"] >= 20 and not run["applied"], run["fits"][0]["steps"]  # --steps, not the env's 3
        assert any("GPUSCOUT_TUNE in your environment is tune's own" in n for n in run["notes"]), run["notes"]


def test_a_dry_run_with_json_prints_its_plan_as_json(tmp_path):
    """Issue 87, item 4: `tune --dry-run --json` printed text (docs/options.md: JSON on stdout,
    nothing else there): the plan from this script's stored watch, or the rules without one."""
    import json

    store = tmp_path / "runs.db"
    (tmp_path / "train.py").write_text(TRAIN)
    none = run_cli("tune", "--dry-run", "--json", "--store", str(store), "--", "python", "train.py", cwd=tmp_path)
    plan = json.loads(none.stdout)
    assert plan["baseline"] is None and {r["change"] for r in plan["rules"]} >= {"jit_compile", "validation_batch"}
    ran = stored_watch(store, tmp_path, TRAIN)
    done = run_cli("tune", "--dry-run", "--json", "--store", str(store), "--", "python", "train.py", cwd=tmp_path)
    plan = json.loads(done.stdout)
    assert plan["baseline"] == ran.id and plan["command"] == "python train.py" and not plan["rules"]
    assert {s["change"] for s in plan["skipped"]} | {c["knob"] for c in plan["changes"]} >= {"jit_compile", "cache"}
