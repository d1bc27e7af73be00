"""Leases (who runs a trial) and attempts (each run of a trial kept apart): the rules that keep a
sweep from running a trial twice or mixing two runs' results."""

import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from gpuscout.executor import guard
from gpuscout.record.trial import TrialOutcome
from gpuscout.store import Store
from gpuscout.sweep import leases
from gpuscout.sweep.attempts import AttemptFiles, finished_attempt, judge
from gpuscout.sweep.spec import SweepFile


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def claim(store: Store, owner: dict, again=()) -> bool:
    return store.claim_trial("s", "k1", 0, "h", {"x": 1}, owner, "now", leases.alive, again)


def test_a_live_driver_keeps_its_trial_and_a_dead_ones_is_taken_over(store_path):
    ours = leases.me()
    other_live = {**leases.me(), "driver": "other"}  # this very process: alive
    other_dead = {"driver": "dead", "pid": dead_pid(), "host": socket.gethostname(), "started_unix": 1.0}
    with Store(store_path) as store:
        assert claim(store, other_live)
        assert not claim(store, ours)  # held by a live driver: never run twice
        assert claim(store, other_live)  # its own claim again (a retry) is fine
        outcome = TrialOutcome(key="k1", index=0, status="ok", params={"x": 1}, metrics={"m": 1})
        store.finish_trial("s", "k1", 0, "h", "ok", {"x": 1}, outcome, "now")
        assert store.leases("s") == {}  # the lease ends with the result, in one transaction
        assert not claim(store, ours)  # ended ok: not run again
        assert claim(store, ours, again=("ok",))  # unless asked (--retry-failed asks for its statuses)
        store.put_trial("s", "k2", 1, "h", "running", {"x": 2}, None, "now")
        assert store.claim_trial("s", "k2", 1, "h", {"x": 2}, other_dead, "now", leases.alive, ())
        assert store.claim_trial("s", "k2", 1, "h", {"x": 2}, ours, "now", leases.alive, ())  # owner gone


def test_whether_an_owner_is_alive():
    me = leases.me()
    now = time.time()
    assert leases.alive(me, now)
    assert not leases.alive({**me, "pid": dead_pid()}, now)
    # the same pid as a process started at another time: a reused pid, not the owner
    assert not leases.alive({**me, "started_unix": me["started_unix"] - 100}, now)
    remote = {"driver": "r", "pid": 1, "host": "another-host", "started_unix": 0.0}
    assert leases.alive(remote, now - 10, now=now)  # another host: only its heartbeat tells
    assert not leases.alive(remote, now - leases.LEASE_S - 1, now=now)


def test_a_dead_owners_group_is_killed_but_never_a_reused_group_id():
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        owner = {"driver": "d", "pid": dead_pid(), "host": socket.gethostname(), "started_unix": 1.0}
        # a pgid whose leader started at another time is some other program's: left alone
        assert not leases.alive({**owner, "pgid": left.pid, "pgid_started_unix": 1.0}, time.time())
        assert left.poll() is None
        # the trial's own group (its leader's start time matches): killed before the trial runs again
        assert not leases.alive({**owner, **leases.group(left.pid)}, time.time())
        assert left.wait(timeout=5) == -9
    finally:
        left.kill()
        left.wait()


SWEEP = SweepFile.model_validate(
    {"name": "t", "command": "python t.py", "reports": ["acc"], "metric": {"name": "acc"}, "space": {"x": [1]}}
)


def test_a_rerun_never_takes_the_interrupted_attempts_results(tmp_path):
    first = AttemptFiles.next_in(tmp_path)
    first.stdout.write_text(json.dumps({"acc": 0.99}) + "\n")  # interrupted: no exit file
    assert finished_attempt(SWEEP, tmp_path) is None  # killed with its driver: to be run again
    second = AttemptFiles.next_in(tmp_path)
    assert second.number == 2
    second.stdout.write_text("")  # the re-run reported nothing and exited 0
    second.exit.write_text(json.dumps({"returncode": 0, "duration_s": 0.13}))
    files, attempt, duration_s = finished_attempt(SWEEP, tmp_path)
    assert files.number == 2 and duration_s == 0.13 and not attempt.warm  # no word of its guard's: cold
    assert attempt.status == "failed" and attempt.metrics == {} and "without reporting 'acc'" in attempt.message
    assert judge(SWEEP, first, 0).metrics == {"acc": 0.99}  # the first attempt's own, kept apart
    # a trial forked from the warm interpreter: its guard said so, and a resume that adopts it keeps it
    third = AttemptFiles.next_in(tmp_path)
    third.stdout.write_text(json.dumps({"acc": 0.98}) + "\n")
    third.exit.write_text(json.dumps({"returncode": 0, "duration_s": 0.2, "warm": True}))
    _, adopted, _ = finished_attempt(SWEEP, tmp_path)
    assert (adopted.status, adopted.warm) == ("ok", True)


def test_a_reserved_status_reads_unwritten_until_its_writer_fills_its_room(tmp_path):
    """Issue 87, item 8: the exit and done files are reserved before the trial runs, so a trial
    that fills the disk still leaves the word that it finished. A reservation alone is no word:
    the attempt is not taken as finished; written in place, it is, and nothing of the
    placeholder is left in it."""
    files = AttemptFiles.next_in(tmp_path)
    files.stdout.write_text(json.dumps({"acc": 0.97}) + "\n")
    files.reserve()
    assert files.exit.stat().st_size == guard.RESERVED_BYTES == files.done.stat().st_size
    assert finished_attempt(SWEEP, tmp_path) is None and files.code_done() is None
    inode = files.exit.stat().st_ino
    assert guard.write_whole(str(files.exit), json.dumps({"returncode": 0, "duration_s": 0.5}))
    assert files.exit.stat().st_ino == inode  # in place: no new file, so no new block on a full disk
    assert json.loads(files.exit.read_text()) == {"returncode": 0, "duration_s": 0.5}
    _, attempt, duration_s = finished_attempt(SWEEP, tmp_path)
    assert (attempt.status, attempt.metrics, duration_s) == ("ok", {"acc": 0.97}, 0.5)
    with pytest.raises(FileExistsError):
        files.reserve()  # a reservation is a new file, never one that was there
    # a text longer than the room, or a file never reserved: through a temporary file, renamed
    longer = json.dumps({"returncode": 1, "pad": "x" * guard.RESERVED_BYTES})
    assert guard.write_whole(str(files.exit), longer) and files.exit.read_text() == longer
    assert files.exit.stat().st_ino != inode and sorted(p.name for p in tmp_path.iterdir()) == [
        "done-1.json",
        "exit-1.json",
        "stdout-1.log",
    ]
    assert not guard.write_whole(str(tmp_path / "gone" / "exit-9.json"), "{}")  # said, never raised


def test_the_lease_names_the_trial_group_of_a_running_process():
    me = psutil.Process()
    assert leases.group(os.getpid()) == {"pgid": os.getpid(), "pgid_started_unix": me.create_time()}
    assert leases.group(dead_pid())["pgid_started_unix"] is None


def test_a_trial_whose_files_say_it_ended_is_taken_from_them_whatever_the_store_missed(tmp_path):
    """Issue 79, item 3: a trial stored `interrupted` by a stop signal that came just after it
    ended, and one the store never took (a full disk), each with an attempt that ran to its end
    (exit 0, its metric reported): `--resume` takes both from their files and runs neither again;
    an interrupted trial whose attempt was stopped (no exit file) runs again, and without --resume
    nothing is taken."""
    from gpuscout.sweep import runner as run_lib
    from gpuscout.sweep.expansion import expand
    from gpuscout.sweep.resume_plan import Checked, SweepOptions, plan

    sweep = SweepFile.model_validate(
        {
            "name": "t",
            "command": "python t.py {x}",
            "reports": ["acc"],
            "metric": {"name": "acc"},
            "space": {"x": [1, 2, 3]},
        }
    )
    trials = expand(sweep)
    checked = Checked(sweep, "h", trials, run_lib.slots_for(None, 1, 1), {}, tmp_path / "t.yaml")
    log_root = tmp_path / "logs"
    ended, unstored, stopped = trials
    for trial, exit_code in ((ended, 0), (unstored, 0), (stopped, None)):
        folder = run_lib.trial_dir(log_root, trial)
        folder.mkdir(parents=True)
        attempt = AttemptFiles.next_in(folder)
        attempt.stdout.write_text(json.dumps({"acc": 0.5 + trial.index / 10}) + "\n")
        if exit_code is not None:
            attempt.exit.write_text(json.dumps({"returncode": exit_code, "duration_s": 0.1}))
    with Store(tmp_path / "results.sqlite") as store:
        for trial in (ended, stopped):
            outcome = TrialOutcome(key=trial.key, index=trial.index, status="interrupted", params=trial.params)
            store.finish_trial("t", trial.key, trial.index, "h", "interrupted", trial.params, outcome, "now")
        resumed = plan(checked, SweepOptions(resume=True, cpu_slots=1, log_root=log_root), store)
        fresh = plan(checked, SweepOptions(cpu_slots=1, log_root=log_root, dry_run=True), store)
    taken = {r.key: (r.status, r.metrics) for r in resumed.adopted}
    assert taken == {ended.key: ("ok", {"acc": 0.5}), unstored.key: ("ok", {"acc": 0.6})}
    assert [t.key for t in resumed.todo] == [stopped.key]  # stopped mid-run: runs again, once
    assert {r.key for r in fresh.adopted} == set()  # a new sweep's run takes nothing from old files


def test_a_trial_that_ended_failed_as_its_driver_died_runs_again_and_one_that_finished_is_taken(tmp_path):
    """Issue 87, item 9: kill -9 of a warm sweep a second into a trial; the trial ended in its
    guard's grace, failed (its metric never reported), and `--resume` stored it failed instead of
    running it. Under a dead driver's lease, only an attempt that ran to its end (exit 0, its
    metric) or that reported the metric before its guard ended it (its work done, only its exit
    cut) is taken from its files; one that ended failed without it runs again, once."""
    from gpuscout.sweep import runner as run_lib
    from gpuscout.sweep.expansion import expand
    from gpuscout.sweep.resume_plan import Checked, SweepOptions, plan

    sweep = SweepFile.model_validate(
        {"name": "t", "command": "python t.py {x}", "reports": ["acc"], "metric": {"name": "acc"}}
        | {"space": {"x": [1, 2, 3]}}
    )
    trials = expand(sweep)
    checked = Checked(sweep, "h", trials, run_lib.slots_for(None, 1, 1), {}, tmp_path / "t.yaml")
    log_root = tmp_path / "logs"
    finished, killed, reported = trials
    cases = ((finished, 0, '{"acc": 0.9}\n'), (killed, -9, ""), (reported, -9, '{"acc": 0.8}\n'))
    for trial, exit_code, report in cases:
        folder = run_lib.trial_dir(log_root, trial)
        folder.mkdir(parents=True)
        attempt = AttemptFiles.next_in(folder)
        attempt.stdout.write_text(report)
        attempt.exit.write_text(json.dumps({"returncode": exit_code, "duration_s": 1.0}))
    gone = {**leases.me(), "pid": dead_pid()}  # the driver killed with -9: its lease left behind
    with Store(tmp_path / "results.sqlite") as store:
        for trial in trials:
            assert store.claim_trial("t", trial.key, trial.index, "h", trial.params, gone, "now", leases.alive, ())
        resumed = plan(checked, SweepOptions(resume=True, cpu_slots=1, log_root=log_root), store)
    taken = {r.key: r.metrics for r in resumed.adopted}
    assert taken == {finished.key: {"acc": 0.9}, reported.key: {"acc": 0.8}}
    assert [t.key for t in resumed.todo] == [killed.key]


def test_a_sweep_stopped_just_after_a_trial_ended_stores_it_ended_not_interrupted(tmp_path):
    """The cause of issue 79's item 3a: the driver's stop handler stored every trial it had not read
    yet as interrupted, one that had already ended by itself (exit 0, its metric) among them. Now
    its files are read first: the ended one stored ok with its metric, the other interrupted."""
    from gpuscout.sweep import runner as run_lib
    from gpuscout.sweep.driver import _Hooks
    from gpuscout.sweep.expansion import expand
    from gpuscout.sweep.resume_plan import Display, Plan, SweepOptions

    sweep = SweepFile.model_validate(
        {
            "name": "t",
            "command": "python t.py {x}",
            "reports": ["acc"],
            "metric": {"name": "acc"},
            "space": {"x": [1, 2]},
        }
    )
    ended, working = expand(sweep)
    log_root = tmp_path / "logs"
    for trial in (ended, working):
        folder = run_lib.trial_dir(log_root, trial)
        folder.mkdir(parents=True)
        attempt = AttemptFiles.next_in(folder)
        attempt.stdout.write_text(json.dumps({"acc": 0.7}) + "\n" if trial is ended else "")
        if trial is ended:
            attempt.exit.write_text(json.dumps({"returncode": 0, "duration_s": 0.1}))
    p = Plan(
        sweep, "h", [ended, working], [ended, working], [], run_lib.slots_for(None, 1, 1), log_root, tmp_path / "c"
    )
    with Store(tmp_path / "results.sqlite") as store:
        hooks = _Hooks(p, SweepOptions(cpu_slots=1), store, Display(), [])
        hooks.running = {ended.key: ended, working.key: working}
        hooks.stopped()
        stored = {t.key: (t.status, t.result.metrics if t.result else None) for t in store.trials("t")}
    assert stored == {ended.key: ("ok", {"acc": 0.7}), working.key: ("interrupted", {})}
