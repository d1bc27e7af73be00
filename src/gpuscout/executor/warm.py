"""Warm starts: a sweep's trials of `python SCRIPT ...` forked from an interpreter that has imported
the script's frameworks once (executor/zygote.py), instead of each paying the imports again.

`WarmStarts.starter(argv, env)` gives executor/process.run a way to start one such command, or
None where a cold start is the only faithful one: a command that is not `python SCRIPT`, a script
that changes its environment in code before importing a framework other than by plain literals,
a platform without fork, an interpreter whose imports opened a GPU. What the zygote preloads is
what the script imports at its top, before any statement that could change what those imports
do (scanned, never run: executor/warm_scan.py), then whatever frameworks a finished trial reports it imported besides
(Keras imports TensorFlow itself to seed it, for one).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpuscout.core.frameworks import FRAMEWORKS
from gpuscout.executor.process import GUARD, stop_group
from gpuscout.executor.warm_scan import preloads, python_script, with_settings
from gpuscout.executor.zygote import SOCKET_FD_ENV

ZYGOTE = Path(__file__).resolve().parent / "zygote.py"
# How long the zygote may take to import the frameworks before trials start cold instead: Keras
# and TensorFlow take 3 s on a quiet 2-core machine, several times that beside running trials.
READY_S = 180.0
# How long a start request may wait for the zygote's answer (a preload of a learned module runs first)
START_S = 120.0


def how_it_ended(process: subprocess.Popen) -> str:
    """Why a warm interpreter can no longer serve, in words: killed by a signal, or its exit status."""
    try:
        code = process.wait(timeout=2)  # its socket closed as it ended: reaped a moment later
    except subprocess.TimeoutExpired:
        return "its interpreter closed its connection"
    if code < 0:
        try:
            return f"its interpreter was killed ({signal.Signals(-code).name})"
        except ValueError:
            return f"its interpreter was killed (signal {-code})"
    return f"its interpreter ended (exit status {code})"


class WarmChild:
    """A trial forked by the zygote, as executor/process.py looks at a Popen: `pid` leads its
    process group; its exit status comes from the zygote, which reaps it."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("a warm-started trial", timeout)
        return self.returncode

    def ended(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._ended.set()


def _fd(sink) -> tuple[int, bool]:
    """The file descriptor a Popen-style sink names, and whether it was opened here."""
    if sink is None:
        return sys.stdout.fileno(), False
    if sink == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_WRONLY), True
    return (sink, False) if isinstance(sink, int) else (sink.fileno(), False)


class Zygote:
    """One warm interpreter: started under executor/guard.py (it dies with gpuscout), asked over a
    socket to fork trials, and to import a module more."""

    def __init__(self, python: str, modules: list[str], env: dict[str, str], log: Path) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lock, self.ids = threading.Lock(), itertools.count(1)
        self.children: dict[int, WarmChild] = {}  # forked and not yet reaped, by pid
        # each start request's answer: its child (which may have ended already), or None (refused)
        self.answers: dict[int, WarmChild | None] = {}
        self.abandoned: set[int] = set()  # requests whose answer came too late: started cold instead
        self.changed = threading.Condition()
        self.ready: dict | None = None
        self.refused: str | None = None
        self.died = False  # it ended before close(): the trials it had forked were ended with it
        argv = [sys.executable, "-I", "-S", GUARD, str(os.getpid()), "-", "--", python, str(ZYGOTE), *modules]
        self.closed, spawned = threading.Event(), threading.Event()
        # Started by a thread that lives until close(): the kernel tells the guard when the *thread*
        # that started it ends (PR_SET_PDEATHSIG), and a sweep's slot thread ends while other
        # slots' trials still run from this zygote (seen: the last trial killed, -9)
        threading.Thread(
            target=self._hold, args=(argv, {**env, SOCKET_FD_ENV: str(theirs.fileno())}, theirs, log, spawned),
            daemon=True, name="gpuscout-zygote-parent",
        ).start()  # fmt: skip
        spawned.wait()
        theirs.close()
        if self.process is None:
            raise self.failed
        threading.Thread(target=self._read, daemon=True, name="gpuscout-zygote").start()
        began = time.monotonic()
        with self.changed:
            if not self.changed.wait_for(lambda: self.ready is not None or self.refused, READY_S):
                self.refused = f"its interpreter did not import {', '.join(modules)} within {READY_S:.0f} s"
        if self.refused is None and self.ready:
            self.refused = self.ready.get("refused")
        self.ready_s = time.monotonic() - began  # its imports, which the first trials waited for

    def _hold(self, argv: list[str], env: dict, theirs: socket.socket, log: Path, spawned: threading.Event) -> None:
        self.process, self.failed = None, None
        try:
            with open(log, "ab") as out:
                self.process = subprocess.Popen(
                    argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    pass_fds=(theirs.fileno(),), start_new_session=True,
                )  # fmt: skip
        except OSError as exc:
            self.failed = exc
        spawned.set()
        self.closed.wait()

    @property
    def imported(self) -> list[str]:
        return list((self.ready or {}).get("imported", []))

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:  # it died: its trials' guards end them (their parent is gone)
                why = None if self.closed.is_set() else how_it_ended(self.process)  # not under the lock: it waits
                with self.changed:
                    if not self.closed.is_set():  # not gpuscout's own close(): it failed
                        self.died = True
                        self.refused = self.refused or why
                    for child in self.children.values():
                        child.ended(-9)
                    self.changed.notify_all()
                return
            message = json.loads(data)
            with self.changed:
                if "ready" in message:
                    self.ready = message
                    self.refused = self.refused or message.get("refused")
                elif "started" in message:
                    # The child itself goes with the answer: a trial that ends at once is reaped
                    # (and left `children`) before its starter wakes, and a starter that then found
                    # no child started it cold a second time (issue 87, item 8's drill: a trial's
                    # side effect done twice, both runs' output in one log)
                    child = WarmChild(message["pid"]) if "pid" in message else None
                    if message["started"] in self.abandoned:  # its starter gave up and started it cold
                        self.abandoned.discard(message["started"])
                        if child is not None:
                            with contextlib.suppress(OSError):  # its group (the zygote made it one)
                                os.killpg(child.pid, signal.SIGKILL)
                    else:
                        if child is not None:
                            self.children[child.pid] = child
                        self.answers[message["started"]] = child
                elif "exited" in message and message["exited"] in self.children:
                    self.children.pop(message["exited"]).ended(os.waitstatus_to_exitcode(message["status"]))
                self.changed.notify_all()

    def start(self, argv: list[str], env: dict, stdout, stderr, events_fd: int, status_file: Path | None):
        """Fork `argv` as a trial; its WarmChild, or None when this zygote cannot (start it cold)."""
        if self.refused:
            return None
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "status_file": str(status_file or "-")}
        sinks = [_fd(stdout), _fd(stderr)]
        try:
            with self.lock:
                request["start"] = ident = next(self.ids)
                socket.send_fds(self.sock, [json.dumps(request).encode()], [fd for fd, _ in sinks] + [events_fd])
        except OSError:
            return None
        finally:
            for fd, opened in sinks:
                if opened:
                    os.close(fd)
        with self.changed:
            if not self.changed.wait_for(lambda: ident in self.answers or self.refused is not None, START_S):
                self.abandoned.add(ident)
            return self.answers.pop(ident, None)

    def preload(self, modules: list[str]) -> None:
        """Import these too, for the trials started after (a finished trial's frameworks)."""
        missing = [m for m in modules if m in FRAMEWORKS and m not in self.imported]
        if missing and not self.refused:
            try:
                with self.lock:
                    self.sock.send(json.dumps({"import": missing}).encode())
            except OSError:
                pass

    def close(self) -> None:
        self.closed.set()  # then its end is not a failure (the summary reads `refused` after)
        self.sock.close()
        stop_group(self.process)


class Starter:
    """executor/process.run's `start` for one command: forked by `zygote`, or None (then process.run
    starts it cold); `used` says which it was."""

    def __init__(self, zygote: Zygote, argv: list[str]) -> None:
        self.zygote, self.argv, self.used = zygote, argv, False

    def __call__(self, env: dict, stdout, stderr, events_fd: int, status_file: Path | None) -> WarmChild | None:
        child = self.zygote.start(self.argv, env, stdout, stderr, events_fd, status_file)
        self.used = child is not None
        return child

    def learn(self, frameworks: list[str]) -> None:
        """What the trial it started reported it imported besides: imported for the next trials."""
        self.zygote.preload(frameworks)

    @property
    def lost(self) -> bool:
        """Forked, then ended because the interpreter it was forked from died: gpuscout's failure,
        not the trial's (sweep/runner.py runs it again, cold)."""
        return self.used and self.zygote.died


class WarmStarts:
    """The zygotes of one sweep, one for each interpreter, script and environment its trials run
    with (`per_trial`: whether a variable differs between trials and is read only once a trial runs,
    as CUDA_VISIBLE_DEVICES, or again by a fork (core/events.on_environment): never at an import)."""

    def __init__(self, log_folder: Path, per_trial: Callable[[str], bool], most: int | None = None) -> None:
        self.log_folder, self.per_trial = log_folder, per_trial
        # `most`: how many may live at once; the one used longest ago is closed for a new one (tune
        # runs one command at a time, under as many environments as it has settings)
        self.most = most
        self.zygotes: dict[tuple, Zygote | None] = {}  # None: it could not be started (trials start cold)
        self.made: list[Zygote] = []  # kept after close(), for the summary
        self.lock = threading.Lock()

    def _zygote(
        self, argv: list[str], env: dict[str, str], known: tuple[str, ...] = (), like: str | None = None
    ) -> Zygote | None:
        if not hasattr(os, "fork") or sys.platform != "linux":  # macOS: frameworks are not fork-safe
            return None
        found = python_script(argv, env)
        if found is None:
            return None
        python, script = found[0], like or found[1]
        shared = {k: v for k, v in env.items() if not self.per_trial(k)}
        key = (python, os.path.realpath(script), tuple(sorted(shared.items())))
        with self.lock:
            if key in self.zygotes:
                self.zygotes[key] = self.zygotes.pop(key)  # the latest used last
            else:
                live = [k for k, z in self.zygotes.items() if z is not None and not z.closed.is_set()]
                for old in live[: len(live) - self.most + 1] if self.most else []:
                    self.zygotes.pop(old).close()  # type: ignore[union-attr]
                modules, settings = preloads(script)
                modules += [m for m in known if m in FRAMEWORKS and m not in modules]
                log = self.log_folder / f"warm-python-{len(self.zygotes) + 1}.log"
                try:
                    self.zygotes[key] = Zygote(python, modules, with_settings(shared, settings), log)
                    self.made.append(self.zygotes[key])
                except OSError:
                    self.zygotes[key] = None
            return self.zygotes[key]

    def starter(
        self, argv: list[str], env: dict[str, str], known: tuple[str, ...] = (), like: str | None = None
    ) -> Starter | None:
        """How executor/process.run starts `argv` warm, or None: a cold start. `known`: frameworks an
        earlier run of the script said it imported, which a new warm interpreter imports too;
        `like`: the script whose interpreter serves this one (a copy of it: the same imports)."""
        zygote = self._zygote(argv, env, known, like)
        return Starter(zygote, argv) if zygote is not None and not zygote.refused else None

    def summary(self) -> dict | None:
        """What the sweep's summary says of its warm interpreters (None: it started none)."""
        if not self.made:
            return None
        imported = [m for z in self.made for m in z.imported]
        return {
            "interpreters": len(self.made),
            "imported": list(dict.fromkeys(imported)),
            "ready_s": max(z.ready_s for z in self.made),
            "refused": [z.refused for z in self.made if z.refused],
        }

    def close(self) -> None:
        with self.lock:
            for zygote in filter(None, self.zygotes.values()):
                zygote.close()
            self.zygotes.clear()
