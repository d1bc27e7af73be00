"""`gpuscout watch --pid PID`: a training already running, seen through NVML only.

Nothing is injected into the process (it is not gpuscout's): its GPUs are those whose process
list shows it or one of its descendants, sampled for the duration asked, or until it ends, or
until Ctrl-C. The verdict can say only what utilisation, memory and power show, and says so.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import psutil

from gpuscout.analysis import watch as analysis
from gpuscout.core.errors import UsageError
from gpuscout.executor.process import process_tree
from gpuscout.measure import engine
from gpuscout.measure.command import Command, workload_of
from gpuscout.measure.gpus import GpuWatch
from gpuscout.measure.view import View
from gpuscout.measure.watching import WatchOptions
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store

DEFAULT_DURATION_S = 60.0


def target(pid: int, nvml) -> tuple[psutil.Process, list[int]]:
    """The process and the NVML indices of the GPUs it (or a descendant) holds a context on;
    UsageError naming what was seen when there is no such process or no such GPU."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
    except psutil.NoSuchProcess:
        raise UsageError(f"--pid {pid}: no such process") from None
    except psutil.AccessDenied:
        raise UsageError(f"--pid {pid}: not allowed to look at that process (another user's?)") from None
    if not nvml.available:
        raise UsageError(f"--pid needs NVML to see the process's GPUs, and there is none here: {nvml.error}")
    tree = process_tree(pid)
    listed = {g: {p.pid for p in nvml.compute_processes(g)} for g in range(nvml.count)}
    used = [g for g, pids in listed.items() if pids & tree]
    if not used:
        shown = "; ".join(f"GPU {g}: {', '.join(map(str, sorted(p))) or 'none'}" for g, p in listed.items())
        raise UsageError(
            f"--pid {pid} ({name}) has no context on any of the {nvml.count} GPU(s) NVML sees "
            f"(processes listed: {shown or 'no GPUs'}); in a container NVML may list the host's pids"
        )
    return proc, used


def watch_pid(pid: int, options: WatchOptions, session: engine.Session, store: Store, view: View) -> WatchRecord:
    """Sample the GPUs of process `pid` for the duration, its end, or Ctrl-C; store the record."""
    nvml = session.nvml
    proc, used = target(pid, nvml)
    try:
        given = proc.cmdline() or [proc.name()]
    except psutil.Error:
        given = [str(pid)]
    command = Command(given=given, argv=given, shell=False, workload=workload_of(given))
    gpus = GpuWatch(nvml, used, options.telemetry_interval_s)
    for g in used:  # it was there when gpuscout looked: the GPU stays its, whenever it ends
        gpus.seen[g].during |= gpus.seen[g].before
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    duration = options.duration_s or DEFAULT_DURATION_S
    gpus.start(pid)
    view.started(command, pid, gpus)
    started, status, ended = time.monotonic(), "ok", None
    try:
        while time.monotonic() - started < duration:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                ended = time.monotonic() - started
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        status = "interrupted"
    except psutil.Error:  # it ended between the two checks
        ended = time.monotonic() - started
    finally:
        view.stopped()
        used_gpus, samples, attribution = gpus.stop()
    notes = [f"the process ended {ended:.0f} s after gpuscout attached"] if ended is not None else []
    observed = analysis.Observed(
        command=given,
        workload=options.label or command.workload,
        mode="pid",
        status=status,
        exit_code=None,
        duration_s=time.monotonic() - started,
        events=[],
        environment=session.host,
        child_env={},
        group_id=session.group_id,
        record_id=uuid.uuid4().hex[:12],
        created_utc=created,
        attached_pid=pid,
        gpus=used_gpus,
        samples=samples,
        interval_s=options.telemetry_interval_s,
        other_pids=attribution.other_pids,
        notes=notes,
    )
    record = analysis.derive(observed)
    store.keep([record])  # saved beside the store if it cannot take it; named when the command ends
    return record
