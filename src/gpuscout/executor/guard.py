"""The guard between gpuscout and every process it starts: no child outlives gpuscout.

executor/process.py starts `python -I -S guard.py PARENT STATUS_FILE -- COMMAND...` as the
leader of a new process group; the guard starts COMMAND in that group and waits for it. When
gpuscout dies, however it dies (kill -9 included), the guard kills the whole group at once: on
Linux the kernel tells it (PR_SET_PDEATHSIG), elsewhere (and for the moment before that is set)
it sees its parent change. A process a child starts inherits the group, so grandchildren (data
loader workers, a shell's commands) go too.

The guard is invisible otherwise: COMMAND inherits its environment and file descriptors, its
exit status is the guard's (the same code, or death by the same signal), Ctrl-C sent to the group
reaches COMMAND (the guard ignores it and waits). A COMMAND that cannot be started is reported on
gpuscout's event channel as {"event": "exec_failed", "errno": N, "message": ...}, exit 127.
When STATUS_FILE is not "-", the exit status is written there (whole) before the guard exits:
a sweep resumed after gpuscout died learns that a trial finished. Where the sweep reserved the
file before the trial started (reserve), it is written in place, so a disk the trial filled
still takes it; a status that cannot be written never changes the exit status.

Standard library only, started with -I -S: it must start in milliseconds and import nothing of
the environment it guards.
"""

import json
import os
import signal
import sys
import time

POLL_S = 0.2  # how often the parent is looked at where the kernel does not say
# How long a command still running when gpuscout dies may take to end by itself. 0.25 s let a soak
# trial that had written its last line run again after a resume, once on a loaded 2-core CI host
# (2026-11-26: descheduled between its side effect and its exit); a second still ends every
# command well within the 2 s tests/integration/test_cli_kills.py gives them.
ENDING_S = 1.0
# ... and past it, how long one still running on a CPU (not asleep) may: a trial whose last act
# (its side effect) was done when the deadline came, descheduled before its exit, ended past 1 s
# once in a soak under the whole suite's load and ran again after the resume (2026-12-05). One
# asleep (time.sleep, waiting on I/O) is in the middle of its work, not at its end: killed at once.
ENDING_MOST_S = 3.0


# The command's pid once started, and its wait status once the parent-death handler reaped it
CHILD: dict = {"pid": None, "status": None}


def kill_group() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)  # the guard too


def on_parent_death(signum=None, frame=None) -> None:
    """Kill the group, unless the command has ended or ends within ENDING_S: then its status is
    still written (a trial that finished as its driver died is not run again) and the group goes
    after. The grace covers a process that has done its last act and is being torn down (a
    millisecond or more on a loaded machine, when waitpid() does not see it ended yet)."""
    if CHILD["pid"] is None:
        kill_group()
    started = time.monotonic()
    while True:
        try:
            done, status = os.waitpid(CHILD["pid"], os.WNOHANG)
        except ChildProcessError:  # reaped already: main() is writing its status
            return
        if done:
            CHILD["status"] = status
            return
        waited = time.monotonic() - started
        if waited > ENDING_MOST_S or (waited > ENDING_S and not on_a_cpu(CHILD["pid"])):
            kill_group()
        time.sleep(0.005)


def on_a_cpu(pid: int) -> bool:
    """Whether the process runs or waits for a CPU (R) or the disk (D), as Linux's /proc says: one
    ending is; one asleep in its work is not. False where it cannot be read (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command's name, which may hold spaces
    return bool(fields) and fields[0] in ("R", "D")


def set_parent_death_signal() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGUSR1, 0, 0, 0)  # PR_SET_PDEATHSIG (linux/prctl.h)
    except (OSError, AttributeError):
        pass  # not Linux: the polling below is the guard's only way


def report_exec_failure(error: OSError, program: str) -> None:
    fd = os.environ.get("GPUSCOUT_EVENTS_FD")
    event = {"event": "exec_failed", "errno": error.errno, "message": error.strerror, "program": program}
    if fd:
        try:
            os.write(int(fd), (json.dumps(event) + "\n").encode())
        except OSError:
            pass


def start(argv: list[str]) -> int:
    """Fork and exec `argv`; in the child, Ctrl-C and the guard's signals act as they normally do."""
    errors_read, errors_write = os.pipe()  # carries an exec failure's errno back
    os.set_inheritable(errors_write, False)
    pid = os.fork()
    if pid == 0:
        os.close(errors_read)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the command starts with nothing blocked
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(errors_write, str(exc.errno).encode())
        os._exit(127)
    os.close(errors_write)
    failed = os.read(errors_read, 32)
    os.close(errors_read)
    if failed:
        os.waitpid(pid, 0)
        code = int(failed)
        report_exec_failure(OSError(code, os.strerror(code)), argv[0])
        sys.exit(127)
    return pid


def wait(pid: int, parent: int) -> int:
    """The child's wait status; the group is killed if the parent goes first."""
    while True:
        if CHILD["status"] is not None:  # reaped by on_parent_death
            return CHILD["status"]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if os.getppid() != parent:
            on_parent_death()
            continue
        if hasattr(signal, "sigtimedwait"):
            signal.sigtimedwait([signal.SIGCHLD], POLL_S)  # wakes at once when the child ends
        else:
            time.sleep(POLL_S / 4)


STARTED = time.monotonic()
# Set in a guard that executor/zygote.py forked for a trial: its status file says the trial was
# forked from the warm interpreter, for a resume that adopts the trial from its files
FORKED = False


def write_status(path: str, status: int) -> None:
    """The command's exit status, for a sweep resumed after its driver died; never raises (the
    guard's own exit status is the command's, whatever the disk does)."""
    write_whole(
        path,
        json.dumps(
            {
                "returncode": os.waitstatus_to_exitcode(status),
                "duration_s": time.monotonic() - STARTED,
                "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "warm": FORKED,
            }
        ),
    )


# A status file's room, kept for it before the command runs: a full disk (issue 87, item 8: a
# trial that filled it lost its exit-N.json and ran again on --resume) cannot refuse a write that
# needs no new block. JSON ignores the spaces that pad it; a status of 4 fields is under 200 bytes.
RESERVED_BYTES = 512
RESERVED = json.dumps({"reserved": True})


def reserve(path: str) -> None:
    """`path` made now, a new file (never through a link), holding the RESERVED marker (readers take
    it for "not written yet") and the room for what write_whole puts there later. OSError if it cannot."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        _write_all(fd, RESERVED.encode().ljust(RESERVED_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_whole(path: str, text: str) -> bool:
    """`text` as `path`'s content, whole or not at all: in place where reserve() kept room for it
    (padded with spaces to that room, so nothing of the marker is left), else through a temporary
    file renamed over it. False where neither could be done (nothing half written). core/outputs'
    replace_whole and write_all do the same for the package; the guard runs with -I -S and imports
    none of it."""
    data = text.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = None
    if fd is not None:
        try:
            room = os.fstat(fd).st_size
            if len(data) <= room:
                # one call of under a page: whole, or not at all
                if os.pwrite(fd, data.ljust(room), 0) == room:
                    os.fsync(fd)
                    return True
        except OSError:
            pass
        finally:
            os.close(fd)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
        return True
    except OSError:
        try:
            os.unlink(partial)
        except OSError:
            pass
        return False


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main() -> None:
    parent, status_file, separator, *argv = sys.argv[1:]
    assert separator == "--" and argv, "usage: guard.py PARENT_PID STATUS_FILE -- COMMAND..."
    parent = int(parent)
    prepare(parent)
    CHILD["pid"] = pid = start(argv)
    supervise(pid, parent, status_file)


def prepare(parent: int) -> None:
    """This process as a guard of `parent`'s: Ctrl-C left to the command, told when the parent
    dies, and the group killed now if it has died already (executor/zygote.py's trial guards too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C passed on to the group is the command's
    signal.signal(signal.SIGUSR1, on_parent_death)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # for sigtimedwait
    set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the kernel could be asked to say so
        kill_group()


def supervise(pid: int, parent: int, status_file: str) -> None:
    """Wait for the command `pid`, write its status to `status_file` ("-": none), and exit as it
    exited; the group is killed if `parent` dies first (executor/zygote.py's trial guards too)."""
    status = wait(pid, parent)
    # The child has ended: a parent that dies now has nothing left to kill, and the status must
    # reach the file whole
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    if status_file != "-":
        write_status(status_file, status)
    if os.getppid() != parent:  # what the command left running goes with gpuscout
        kill_group()
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        sys.exit(code)
    if -code != signal.SIGKILL:  # SIGKILL's action (the OOM killer's -9) is the default and cannot be set
        signal.signal(-code, signal.SIG_DFL)  # die as the child died
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)


if __name__ == "__main__":
    main()
