"""Keeping every slot of a sweep busy: one thread per slot takes the next trial and runs it
(sweep/runner.py), the consecutive-failure stop, more trials proposed as results come (tpe), and
Ctrl-C. Trial threads only run children and hand results to the driver thread through a queue;
the driver alone writes the store and the display (its Hooks), so nothing races on SQLite or the
terminal.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from gpuscout.sweep.expansion import Trial
from gpuscout.sweep.leases import HEARTBEAT_S
from gpuscout.sweep.runner import Slot, TrialResult, TrialRunner

# After Ctrl-C, how long the driver waits for its trials' results (a trial's group gets SIGTERM,
# then SIGKILL after executor/process.TERM_GRACE_S) before it stores the rest as interrupted.
STOPPING_S = 10.0


class Hooks:
    """What the driver does for run_local, on its own thread (the only one that writes the store
    and the display). The defaults run every trial and keep nothing."""

    def claim(self, trial: Trial, slot: Slot) -> bool:
        """Take the trial before it runs (a lease in the store); False: another driver has it."""
        return True

    def started(self, trial: Trial, slot: Slot) -> None: ...
    def spawned(self, trial: Trial, pgid: int) -> None: ...
    def finished(self, result: TrialResult) -> None: ...
    def noted(self, text: str) -> None:
        """Something the user should know as it happens (a Ray node died)."""

    def tick(self) -> None:
        """Called every HEARTBEAT_S or so while trials run (the driver renews its leases)."""

    def stopped(self) -> None:
        """The sweep was interrupted and every result that came back is stored: what was claimed
        and never came back is said to be interrupted, not left `running`."""


def run_local(
    trials: list[Trial],
    slots: list[Slot],
    runner: TrialRunner,
    max_consecutive_failures: int,
    hooks: Hooks,
    more: Callable[[], Trial | None] | None = None,
) -> str | None:
    """Run `trials` over `slots`, then what `more` proposes (tpe: the next trial from the results
    so far) until it proposes None; returns why the sweep stopped early, or None. The calling
    thread is the driver: `hooks` run on it, and a trial thread waits for the driver's answer to
    its claim before it starts anything. Ctrl-C kills every running trial's process group."""
    pending: queue.Queue = queue.Queue()
    for t in trials:
        pending.put(t)
    proposing = threading.Lock()

    def next_trial() -> Trial | None:
        try:
            return pending.get_nowait()
        except queue.Empty:
            if more is None:
                return None
            with proposing:
                return more()

    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    runner.on_spawn = lambda trial, pgid: events.put(("spawned", (trial, pgid), None))

    def ask(kind: str, payload, slot: Slot):
        """Hand something to the driver and wait until it has been dealt with; its answer."""
        answer: list = []
        done = threading.Event()
        events.put((kind, (payload, answer, done), slot))
        done.wait()
        return answer[0] if answer else None

    def work(slot: Slot) -> None:
        while not stop.is_set():
            trial = next_trial()
            if trial is None:
                return
            if not ask("claim", trial, slot):
                continue
            ask("result", runner.run(trial, slot, stop), slot)  # the driver has counted it: take another

    def handle(kind: str, payload, slot: Slot | None) -> None:
        nonlocal consecutive, reason
        if kind == "spawned":
            hooks.spawned(*payload)
            return
        item, answer, done = payload
        try:
            if kind == "claim":
                answer.append(not stop.is_set() and hooks.claim(item, slot))
                if answer[0]:
                    hooks.started(item, slot)
                return
            hooks.finished(item)
            if item.ours and not stop.is_set():  # gpuscout's own failure: every trial would meet it
                reason = f"trial {item.index}: {item.message}; the sweep stopped (its other trials would meet the same)"
                stop.set()
            if item.status == "interrupted":
                return
            consecutive = 0 if item.status in ("ok", "pruned") else consecutive + 1  # pruned: ran as it should
            if consecutive >= max_consecutive_failures and not stop.is_set():
                reason = (
                    f"{consecutive} trials failed in a row (the last: {item.message}); stopped as "
                    f"max_consecutive_failures = {max_consecutive_failures} asks"
                )
                stop.set()
        finally:
            done.set()

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    consecutive, reason, beat = 0, None, time.monotonic()
    try:
        while any(t.is_alive() for t in threads) or not events.empty():
            if time.monotonic() - beat >= HEARTBEAT_S:
                hooks.tick()
                beat = time.monotonic()
            try:
                handle(*events.get(timeout=0.2))
            except queue.Empty:
                continue
    except KeyboardInterrupt:
        stop.set()
        runner.kill_all()
        deadline = time.monotonic() + STOPPING_S
        while (any(t.is_alive() for t in threads) and time.monotonic() < deadline) or not events.empty():
            try:  # store what the stopped trials return, and release their threads
                handle(*events.get(timeout=0.1))
            except queue.Empty:
                continue
            except KeyboardInterrupt:  # a second Ctrl-C: the trials are being stopped already
                continue
        hooks.stopped()
        raise
    return reason
