"""Who runs a sweep's trial: a lease held by one driver, so that no trial runs twice.

A driver claims a trial in the store before starting it (store/sqlite.py `claim_trial`, one
transaction) and renews its leases every HEARTBEAT_S while its trials run. Another driver — a
second `gpuscout sweep` on the same sweep, or `--resume` after a crash — takes a trial over
only when its owner is provably gone: on the same host, its pid is not running (or is another
process: its start time differs) and the trial's process group is dead (what is left of it is
killed first); on another host, its lease has not been renewed for LEASE_S.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid

import psutil

HEARTBEAT_S = 5.0
# Far above HEARTBEAT_S: a driver busy storing a large result or a slow shared file system must
# not lose its trials to another host's driver.
LEASE_S = 60.0


def me() -> dict:
    """This driver, as its leases name it."""
    return {
        "driver": uuid.uuid4().hex[:12],
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_unix": _started(os.getpid()),
    }


# A process is the one a lease names when its start time (psutil's create_time) matches to
# within this: the pid alone may since have been given to another process.
SAME_START_S = 1.0


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:  # gone
        return None


def _same_start(started: float | None, recorded) -> bool:
    return started is not None and recorded is not None and abs(started - float(recorded)) < SAME_START_S


def _same_process(owner: dict) -> bool:
    try:
        return _same_start(_started(int(owner["pid"])), owner.get("started_unix"))
    except (KeyError, TypeError, ValueError):
        return False


def group(pgid: int) -> dict:
    """A trial's process group as its lease names it: the group id, and when its leader (the
    trial's guard) started, so that a pid reused by an unrelated process is never taken for it."""
    return {"pgid": pgid, "pgid_started_unix": _started(pgid)}  # None: ended already


def _group_left(owner: dict) -> bool:
    """Whether processes of the owner's trial group are still running. The group id stays
    reserved while any member lives, so a group whose leader is gone is still the trial's; a
    leader that started at another time is another process with a reused pid."""
    pgid = owner.get("pgid")
    if not pgid:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    started = _started(pgid)
    return started is None or _same_start(started, owner.get("pgid_started_unix"))


def alive(owner: dict, heartbeat_unix: float, now: float | None = None) -> bool:
    """Whether the driver that holds a lease may still be running the trial. A dead owner's
    trial group, if anything of it is left on this host, is killed here (its guard kills it when
    the driver dies; this is for a guard that could not), so the trial can run again."""
    now = time.time() if now is None else now
    if owner.get("host") != socket.gethostname():
        return now - heartbeat_unix < LEASE_S
    if _same_process(owner):
        return True
    if _group_left(owner):
        try:
            os.killpg(owner["pgid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return False
