"""What `gpuscout watch` runs: the user's command as given, checked before it starts, and the
environment that instruments it.

The instrumentation reaches every Python process of the command through a sitecustomize module
on its PYTHONPATH (Python imports one at start-up: docs.python.org/3/library/site.html). That
folder is made per watch: the sitecustomize and a link to this gpuscout package, nothing else,
so the script's interpreter (another virtual environment, say) sees none of gpuscout's own
dependencies and keeps its own versions of everything.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuscout.core.errors import UsageError
from gpuscout.core.tune_settings import ENV as TUNE_VARIABLE
from gpuscout.core.watch_events import Exiting, WatchEvent
from gpuscout.executor import process, scratch

# Characters that make a one-word command a shell line: `gpuscout watch -- 'python a.py | tee log'`.
SHELL_CHARACTERS = set("|&;<>()$`*?~\n")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Shell builtins a line may start with (after VAR=x assignments): nothing on PATH to check.
SHELL_BUILTINS = {
    "cd",
    "export",
    "source",
    ".",
    "exec",
    "env",
    "set",
    "time",
    "nice",
    "nohup",
    "eval",
    "if",
    "for",
    "while",
    "{",
    "(",
}

# The event a process of an instrumented command sends at exit once all its code has run (it
# trained); process.run's `last_events` for watch and sweep trials (child/watch_state.on_exit).
EXITING_EVENT = Exiting.KIND


def after_lingering(events: Sequence[WatchEvent]) -> tuple[int | None, str]:
    """A command stopped because a process of it ran all its code and then did not exit: the exit
    status that process would have given (Python's 1 after an uncaught exception, else None: not
    known) and the note that says what happened and what to change."""
    exiting = next(e for e in reversed(events) if isinstance(e, Exiting))
    note = (
        f"process {exiting.pid} ran all of the script's code, then did not exit within "
        f"{process.EXIT_GRACE_S:g} s: gpuscout stopped it, so the exit status it would have given is not "
        "known. TensorFlow 2.21 does this when a tf.data iterator over tf.py_function is finalised at "
        "shutdown (tensorflow#21277); `del` the dataset and its iterators and call gc.collect() at the "
        "script's end to avoid it"
    )
    return (1 if exiting.uncaught else None), note


@dataclass(frozen=True)
class Command:
    """The user's command, as it will run."""

    given: list[str]  # as typed after `--`
    argv: list[str]  # what is started: `given`, or /bin/sh -c LINE for shell syntax
    shell: bool
    workload: str  # the script it runs, for listing and comparing


def looks_like_shell(line: str) -> bool:
    """A command line that needs a shell: operators, substitutions, globs, or VAR=x first."""
    return bool(SHELL_CHARACTERS & set(line)) or bool(ASSIGNMENT.match(line.strip()))


def resolve(given: list[str], shell: bool | None = None, verb: str = "watch") -> Command:
    """Check the command and decide how to start it; UsageError (exit 2) when it cannot run.
    `shell`: None detects shell syntax (one argument that is a shell line, or VAR=x first)."""
    if not given or not given[0].strip():
        raise UsageError(f"no command to {verb}: put it after `--`, e.g. gpuscout {verb} -- python train.py")
    if not shell and given[0].endswith(".ipynb"):
        return notebook(given, verb)
    if shell is None:
        one_line = len(given) == 1 and (looks_like_shell(given[0]) or " " in given[0].strip())
        shell = one_line or bool(ASSIGNMENT.match(given[0]))
    line = given[0] if len(given) == 1 else shlex.join(given)
    words = _words(line) if shell else given
    program = next((w for w in words if not ASSIGNMENT.match(w)), None)
    if program is None:
        raise UsageError(f"no command in {line!r}: only variable assignments")
    if not (shell and program in SHELL_BUILTINS) and _find(program) is None:
        raise UsageError(f"command not found: {program!r} (not on PATH, nor an executable file)")
    if not shell:
        check_script(words[words.index(program) :])
    argv = ["/bin/sh", "-c", line] if shell else list(given)
    return Command(given=list(given), argv=argv, shell=shell, workload=workload_of(words))


def notebook(given: list[str], verb: str) -> Command:
    """`gpuscout watch train.ipynb`: the notebook run top to bottom in a fresh kernel of the kind it
    names (gpuscout.measure.notebook_runner, with gpuscout's Python), checked before anything runs."""
    path = Path(given[0])
    if len(given) > 1:
        raise UsageError(
            f"a notebook takes no arguments ({shlex.join(given[1:])}): set its parameters in a cell, "
            f"then gpuscout {verb} {given[0]}"
        )
    if not path.is_file():
        raise UsageError(f"{given[0]}: no such notebook" + (" (a folder)" if path.is_dir() else f" in {os.getcwd()}"))
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        from gpuscout.measure import notebook_runner as runner
    except ImportError as exc:
        raise UsageError(
            f"running a notebook needs nbclient and ipykernel ({exc}): pip install 'gpuscout[notebook]'"
        ) from None
    try:
        kernel = runner.read(path).metadata.get("kernelspec", {}).get("name") or "python3"
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        KernelSpecManager().get_kernel_spec(kernel)
    except NoSuchKernel:
        raise UsageError(
            f"{given[0]} runs on the kernel {kernel!r}, which is not installed here: `jupyter kernelspec "
            "list` shows those that are"
        ) from None
    argv = [sys.executable, "-m", "gpuscout.measure.notebook_runner", str(path.resolve())]
    return Command(given=list(given), argv=argv, shell=False, workload=path.name)


PYTHON = re.compile(r"^python(\d+(\.\d+)?)?[dmtw]?(\.exe)?$")
# Python's options that take the next word as their value (docs.python.org/3/using/cmdline.html)
PYTHON_VALUED = {"-W", "-X", "--check-hash-based-pycs"}


def script_of(words: list[str]) -> str | None:
    """The script file a `python ... script.py args` command runs; None for -m, -c, stdin or a
    program that is not Python."""
    if not words or not PYTHON.match(Path(words[0]).name):
        return None
    rest = iter(words[1:])
    for word in rest:
        if word in ("-c", "-m", "-") or (
            word.startswith("-") and not word.startswith("--") and word[-1:] in "cm" and word[1:].isalpha()
        ):
            return None  # code or a module, not a file
        if word in PYTHON_VALUED:
            next(rest, None)
        elif not word.startswith("-"):
            return word
    return None


def check_script(words: list[str]) -> None:
    """The script a Python command names exists and is Python source (text): a missing file, a
    folder or a binary is refused before anything runs, as a program not found is. Its syntax is
    left to the script's own interpreter (gpuscout's may be another version)."""
    script = script_of(words)
    if script is None:
        return
    path = Path(script)
    if not path.exists():
        raise UsageError(
            f"{script}: no such file (the script `{' '.join(words[:2])}` would run); check the path from {os.getcwd()}"
        )
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise UsageError(f"{script} is a folder without a __main__.py, not a script Python can run")
    if path.is_file():
        try:
            with open(path, "rb") as handle:
                head = handle.read(1 << 20)
        except OSError as exc:
            raise UsageError(f"cannot read {script}: {exc.strerror}") from None
        if b"\x00" in head:
            raise UsageError(f"{script} is not a Python script (it holds NUL bytes: a binary file?)")


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot read the command {line!r}: {exc}") from None


def _find(program: str) -> str | None:
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program)


def workload_of(words: list[str]) -> str:
    """The script a command runs (train.py, or `-m package.module`), else its program's name."""
    words = [w for w in words if not ASSIGNMENT.match(w)]
    for index, word in enumerate(words):
        if word == "-m" and index + 1 < len(words):
            return words[index + 1]
        if word.endswith(".py"):
            return Path(word).name
    return Path(words[0]).name if words else "command"


def compilation_cache_env(folder: Path, base: dict[str, str]) -> dict[str, str]:
    """What makes a script on Keras' jax backend compile through the persistent cache in `folder`
    (jax reads its options from JAX_* variables), every program however quick (jax keeps only
    those over 1 s by default; a model's initializers are dozens of short compiles). Each of the
    user's own settings in `base` wins."""
    ours = {"JAX_COMPILATION_CACHE_DIR": str(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    return {k: v for k, v in ours.items() if k not in base}


class Instrumentation:
    """The folder on the watched command's PYTHONPATH (a context manager: removed afterwards)."""

    SITECUSTOMIZE = Path(__file__).resolve().parent.parent / "child" / "watch_site.py"

    def __init__(self) -> None:
        self.folder = scratch.make("watch")
        shutil.copyfile(self.SITECUSTOMIZE, self.folder / "sitecustomize.py")
        (self.folder / "gpuscout").symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)

    def env(self, base: dict[str, str], settings: dict[str, str]) -> dict[str, str]:
        """`base` with the instrumentation on its PYTHONPATH (first) and its `settings`. The
        instrumentation's own variables come from `settings` alone: one left in the user's
        environment (a shell that kept tune's GPUSCOUT_TUNE, a job that copied it) switched a plain
        watch's measuring off or crashed it (issue 87, item 2)."""
        path = os.pathsep.join(p for p in (str(self.folder), base.get("PYTHONPATH", "")) if p)
        own = {k: v for k, v in base.items() if not is_instrumentation_variable(k)}
        return {**own, "PYTHONPATH": path, **settings}

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_instrumentation_variable(name: str) -> bool:
    """A variable gpuscout sets for its instrumentation (GPUSCOUT_WATCH_*, GPUSCOUT_TUNE): never taken
    from the user's environment."""
    return name.startswith("GPUSCOUT_WATCH_") or name == TUNE_VARIABLE


def script_file(command: Command, cwd: Path | str) -> Path | None:
    """The script file a Python command runs, resolved from the folder it runs in; None for a shell
    line, -m, -c, or a program that is not Python."""
    found = None if command.shell else script_of(command.argv)
    return (Path(cwd) / found).resolve() if found else None


def script_digest(command: Command, cwd: Path | str) -> str | None:
    """The SHA-256 of the script's bytes, where the command runs one that can be read: with its
    resolved path, what makes a stored run this script's (issue 86: another folder's train.py, run
    by the same words, planned a session and priced its budget)."""
    import hashlib

    path = script_file(command, cwd)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None
    except OSError:
        return None


@dataclass(frozen=True)
class ScriptIdentity:
    """What makes a stored run this command's (issue 86: another folder's train.py, run by the same
    words, planned a session and priced its budget): the same words (the arguments), run in a folder
    that resolves the script to the same file, whose bytes were the same. A command with no script
    file (a shell line, -m) is its words in the same folder. The file is read and digested once,
    however many stored runs it is held against."""

    command: Command
    cwd: Path
    path: Path | None
    digest: str | None

    @classmethod
    def of(cls, command: Command, cwd: Path | str) -> ScriptIdentity:
        return cls(command, Path(cwd).resolve(), script_file(command, cwd), script_digest(command, cwd))

    def ran(self, stored_command: list[str], stored_cwd: str | None, stored_digest: str | None) -> bool:
        """Whether a stored run (its command, folder and script digest) ran this script."""
        if stored_command != self.command.given or stored_cwd is None:
            return False
        if self.path is None:
            return Path(stored_cwd).resolve() == self.cwd
        theirs = script_file(self.command, stored_cwd)
        return theirs == self.path and stored_digest is not None and stored_digest == self.digest
