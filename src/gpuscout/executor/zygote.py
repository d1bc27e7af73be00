"""A warm interpreter: a sweep's trials of `python SCRIPT ...` forked from one process that has
imported the script's frameworks once (executor/warm.py starts and talks to it).

A trial's own interpreter spends seconds before its first epoch: Keras, JAX or TensorFlow
imported (2.2 s for Keras on JAX and 0.9 s for the TensorFlow its seeding pulls in, on the CI's
2 cores), so a pruned trial paid most of its cost before it trained (docs/benchmarks.md, "Warm
starts"). This process imports them once, under the trials' environment and instrumentation,
touches no device, then serves: for each trial it forks a guard (executor/guard.py's, the same
code) that leads a new process group and forks the trial, which becomes `python SCRIPT ARGS` with
the trial's environment, working folder, stdout, stderr and event channel. gpuscout sees a
process group as it does for any child: killed as a whole, the trial's exit status written by
its guard, and nothing left behind when gpuscout dies (gpuscout -> this process's own guard ->
this process -> each trial's guard, each one told by the kernel when its parent dies).

Why not multiprocessing's forkserver: its server runs gpuscout's interpreter and environment, and
its children are multiprocessing's processes (their name, their daemon flag, their own pipes); a
trial here is the user's interpreter running the user's script, as a cold start would be.

Standard library and gpuscout.core.events only until the frameworks are imported; it runs in
the script's interpreter.
Protocol (SOCK_SEQPACKET, one JSON object a message; fds by SCM_RIGHTS):
  in:  {"start": ID, "argv": [...], "env": {...}, "cwd": ..., "status_file": ...} + [stdout, stderr, events]
       {"import": [MODULE, ...]}
  out: {"ready": true, "imported": [...], "refused": REASON | null}   once, and after each import
       {"started": ID, "pid": PID} or {"started": ID, "error": MESSAGE}
       {"exited": PID, "status": WAIT_STATUS}
"""

import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import time

# the channel's names, shared with gpuscout (the trials' instrumentation, on their PYTHONPATH, carries
# the package; the module imports only the standard library)
from gpuscout.core import events

SOCKET_FD_ENV = "GPUSCOUT_ZYGOTE_FD"
MESSAGE_MAX = 1 << 20  # a request carries a whole environment
# Signals this process and the trials' guards change; a trial gets back what the frameworks and
# the instrumentation had set when they were imported (its cold interpreter would have the same)
CHANGED = (signal.SIGINT, signal.SIGUSR1, signal.SIGCHLD)


def send(conn: socket.socket, message: dict) -> None:
    try:
        conn.send(json.dumps(message).encode())
    except OSError:  # gpuscout is gone or done: end (each trial's guard then ends its trial)
        os._exit(0)


def device_files() -> list[str]:
    """The GPU device files this process holds open: a framework that opened one at import has
    started a driver context, which no forked child can use."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia") or target.startswith("/dev/dri"):
            held.append(target)
    return held


def preload(modules: list[str], imported: list[str]) -> str | None:
    """Import each module not imported yet (one that fails is left to the script, which then meets
    the error itself); the reason this process can no longer serve, or None."""
    for name in modules:
        if name in imported:
            continue
        try:
            importlib.import_module(name)
            imported.append(name)
        except ModuleNotFoundError:  # not installed: nothing to import ahead (warm.py adds tensorflow after keras)
            continue
        except Exception as exc:  # noqa: BLE001 - the script's own import will say what is wrong
            print(f"gpuscout zygote: {name} not imported ({type(exc).__name__}: {exc})", file=sys.stderr)
    held = device_files()
    gc.collect()  # what the imports left as garbage goes now, not frozen into every trial (below)
    return f"importing {', '.join(imported)} opened {held[0]}" if held else None


def serve(conn: socket.socket, modules: list[str]) -> dict:
    """Answer requests until the socket closes (then exit); returns only in a trial's process,
    with its request."""
    imported: list[str] = []
    refused = preload(modules, imported)
    handlers = {sig: signal.getsignal(sig) for sig in CHANGED}
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    send(conn, {"ready": True, "imported": imported, "refused": refused})
    while True:
        readable, _, _ = select.select([conn, wake_read], [], [], 1.0)
        if wake_read in readable:
            os.read(wake_read, 4096)
        reap(conn)
        if conn not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(conn, MESSAGE_MAX, 3)
        except ConnectionError:
            data = b""
        if not data:  # gpuscout closed it (the sweep's end) or died: the trials' guards end what is left
            os._exit(0)
        request = json.loads(data)
        if "import" in request:
            refused = refused or preload(request["import"], imported)
            send(conn, {"ready": True, "imported": imported, "refused": refused})
            continue
        if refused:
            send(conn, {"started": request["start"], "error": refused})
            for fd in fds:
                os.close(fd)
            continue
        # The frameworks' objects (half a million with Keras and TensorFlow) leave the collector's
        # view before the fork, as the gc module's documentation advises for a process that forks
        # without exec: a trial's collections no longer walk them (a full one took 0.2 s, and the
        # one at a trial's end as long again: 3 epochs of examples/sweeps/train.py ran in 1.0 s
        # against 1.3-1.5 s: docs/benchmarks.md, "A warm trial's seconds, taken apart"), nor write to
        # their pages.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            os.close(wake_read)
            os.close(wake_write)
            return trial_guard(conn, request, fds, handlers)
        try:
            os.setpgid(pid, pid)  # also done by the guard itself: whichever runs first
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        send(conn, {"started": request["start"], "pid": pid})


def reap(conn: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(conn, {"exited": pid, "status": status})


def trial_guard(conn: socket.socket, request: dict, fds: list[int], handlers: dict) -> dict:
    """In the forked guard: lead a new process group, fork the trial and supervise it as
    executor/guard.py supervises a command it started; returns only in the trial's process."""
    zygote = os.getppid()
    os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    guard.prepare(zygote)
    guard.STARTED = time.monotonic()  # the trial's duration, not this process's
    guard.FORKED = True
    pid = os.fork()
    if pid == 0:
        become_trial(conn, request, fds, handlers)
        return request
    conn.close()
    for fd in fds:
        os.close(fd)
    guard.CHILD["pid"] = pid
    try:
        guard.supervise(pid, zygote, request.get("status_file") or "-")
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    os._exit(1)


def become_trial(conn: socket.socket, request: dict, fds: list[int], handlers: dict) -> None:
    """This process as `python SCRIPT ARGS` would start: its streams, environment, folder, argv,
    sys.path[0], signal handlers and random state (a fork shares its parent's)."""
    conn.close()
    stdout, stderr, channel = fds
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout, 1), (stderr, 2)):
        os.dup2(source, target)
        os.close(source)
    os.set_inheritable(channel, True)  # as pass_fds leaves it: the script's own processes may report
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(events.channel_env(channel))
    events.environment_changed()  # what the instrumentation read at import, read from the run's own
    os.chdir(request["cwd"])
    script = request["argv"][1]
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    for sig, handler in handlers.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    reseed()


def reseed() -> None:
    """Fresh seeds for the generators a new interpreter seeds from the OS: every trial forked from
    one process would otherwise draw the same numbers (a script that sets its own seed, as most
    do, sets it again after this)."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def run(request: dict) -> None:
    """The script as `python SCRIPT` runs it (its own `__main__` module, as the interpreter makes
    it); then its end (exit_quickly) where it ended as a script ends on its own. An uncaught
    exception takes the interpreter's own path (its traceback, sys.last_exc, the exit status,
    death by SIGINT after Ctrl-C)."""
    import builtins
    import importlib.machinery
    import types

    script = request["argv"][1]
    try:
        with open(script, "rb") as handle:
            source = handle.read()
    except OSError as exc:  # as the interpreter says it, with its exit status
        sys.stderr.write(
            f"{sys.executable}: can't open file {os.path.abspath(script)!r}: [Errno {exc.errno}] {exc.strerror}\n"
        )
        sys.exit(2)
    del sys.modules["guard"]
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__, main.__spec__, main.__cached__ = script, builtins, None, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(source, script, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    del main  # sys.modules holds it until exit_quickly lets it go, after the atexit handlers
    exit_quickly(code)


def exit_quickly(code: int) -> None:
    """End as the interpreter ends, up to the teardown of every imported module: the script's
    threads joined and threading's exit hooks run, its atexit handlers run, its own objects
    finalised (a file it left open is flushed and closed), the streams flushed; then exit without
    tearing down Keras, TensorFlow and JAX module by module (1.0-1.2 s of a trial on 2 cores,
    where the script itself had run in 0.7 s: docs/benchmarks.md, "Warm starts"). What a module of
    a framework would release at teardown, the process's end releases."""
    import atexit
    import gc
    import threading

    threading._shutdown()  # noqa: SLF001 - what Py_FinalizeEx calls first: non-daemon threads, exit hooks
    atexit._run_exitfuncs()  # noqa: SLF001 - the handlers, in the order the interpreter runs them
    atexit._clear()  # noqa: SLF001 - they hold the script's functions, and through them its globals
    # The script's module goes as the interpreter's end takes it: out of sys.modules only now, then
    # collected, its objects' finalisers run while its globals still stand (PEP 442). Let go before
    # the handlers ran, a collection the handlers' own allocations set off could finalise them
    # first: a finaliser that hung then kept the exit event from being sent, and the trial ran to
    # its timeout (seen once in 3 runs of test_cli_sweep's never-ending shutdown beside other tests)
    sys.modules.pop("__main__", None)
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    import guard  # beside this file (sys.path[0] while it starts): each trial's guard runs its code

    _conn = socket.socket(fileno=int(os.environ.pop(SOCKET_FD_ENV)))
    _request = serve(_conn, sys.argv[1:])
    del _conn
    run(_request)
