"""Finding the known failures in a log, the root cause first."""

from __future__ import annotations

import functools
import os
import re

from gpuscout.explain.machine import Context, Machine
from gpuscout.explain.remedies import FIXERS
from gpuscout.explain.table import failure_classes
from gpuscout.record.run import ErrorDetail, Explanation  # what records keep is what doctor --explain prints

EVIDENCE_CHARS = 300  # of the matched line, around the match
# A line is matched on its first this many characters: every known failure's text is in the first
# few hundred of its line, and a regular expression over a 60 MiB line (a dumped array) ran for
# minutes without letting a signal through.
MAX_LINE_CHARS = 16_384


def framework_of(text: str, context: Context, machine: Machine) -> str | None:
    """Which framework wrote the log: the run's when known, else what the log names, else the only one installed."""
    if context.framework:
        return context.framework
    lower = text.lower()
    tf, jax = "tensorflow" in lower, bool(re.search(r"\bjax(lib)?\b|xla_bridge", lower))
    if tf != jax:
        return "tensorflow" if tf else "jax"
    installed = machine.installed or list(machine.frameworks)  # the names, known without starting either
    return installed[0] if len(installed) == 1 else None


# A traceback's frame, as Python prints it and as IPython does ("Cell In[20], line 1")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)|^\s*Cell In\[(?P<cell>\d+)\], line (?P<cline>\d+)')
# Frames that are not the user's: installed packages, Python itself, gpuscout's instrumentation
_NOT_USERS = re.compile(r"[/\\](?:site|dist)-packages[/\\]|^<frozen|[/\\]lib[/\\]python3\.\d+[/\\]|[/\\]gpuscout[/\\]")
# A warning as Python's warnings module prints it: its own file and line are where it was raised,
# and it has no traceback (the frames around it are another error's)
_WARNING = re.compile(r"^(?P<file>\S+?):(?P<line>\d+): \w*Warning: ")
# Terminal colours some messages carry (Keras 3 prints an exception's detail in bold)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# How far a traceback's frames are looked for around the error line (a Graph execution error lists
# its frames after the message; tracebacks of a few dozen frames are common)
SITE_LINES = 120


def user_site(lines: list[str], index: int) -> str | None:
    """The user's own code the traceback of the error on line `index` points at: the last frame of a
    file outside the installed packages before it (else the first after it, for a TensorFlow
    graph's 'defined at' list), as "train.py:46 (`model.fit(x, y)`)"."""
    warned = _WARNING.match(lines[index].strip())
    if warned:  # no traceback: the line is the warning's own place, where that is the user's code
        file = warned.group("file")
        return None if _NOT_USERS.search(file) else f"{os.path.basename(file)}:{warned.group('line')}"
    before = range(index - 1, max(-1, index - SITE_LINES), -1)
    after = range(index + 1, min(len(lines), index + SITE_LINES))
    for indices in (before, after):
        for i in indices:
            if lines[i].startswith("Traceback (most recent call last)"):
                break  # another traceback's frames, before or after this one
            match = _FRAME.match(lines[i])
            if match is None:
                continue
            file = match.group("file")
            if file is not None and _NOT_USERS.search(file):
                continue
            where = (
                f"{os.path.basename(file)}:{match.group('line')}"
                if file
                else (f"cell {match.group('cell')}, line {match.group('cline')}")
            )
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            shown = code if code and not _FRAME.match(lines[i + 1]) and not code.startswith("^") else ""
            return f"{where} (`{shown[:80]}`)" if shown else where
    return None


def _evidence(line: str, match: re.Match) -> str:
    line = line.strip()
    if len(line) <= EVIDENCE_CHARS:
        return line
    start = max(0, match.start() - 40)
    return ("…" if start else "") + line[start : start + EVIDENCE_CHARS] + "…"


@functools.cache
def _anywhere(pattern: re.Pattern) -> re.Pattern:
    """`pattern` searching a whole text of lines: a match within one line is a match in it."""
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


def explain(text: str, machine: Machine, context: Context | None = None) -> list[Explanation]:
    """Every known failure in `text`: roots in the order they first appear, then the failures
    that follow from a root found in the same text (`echo_of`)."""
    context = context or Context()
    framework = framework_of(text, context, machine)
    lines = [
        _ANSI.sub("", line[:MAX_LINE_CHARS]) for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    ]
    found: dict[str, tuple[int, re.Match, str, int]] = {}  # code -> (line index, match, line, occurrences)
    classes = failure_classes()
    # Only the classes with a match somewhere in the whole text are looked for line by line: one
    # search of the text each (C's pace), where every line against every pattern took 10 s over the
    # 8 MiB read of a 200 MB log (issue 87, item 10). MULTILINE: `^` and `$` at each line's ends.
    whole = "\n".join(lines)
    present = [f for f in classes if any(_anywhere(p).search(whole) for p in f.patterns)]
    for index, line in enumerate(lines if present else ()):
        for failure in present:
            match = next((m for p in failure.patterns if (m := p.search(line))), None)
            if match is None:
                continue
            if failure.code in found:
                first = found[failure.code]
                found[failure.code] = (first[0], first[1], first[2], first[3] + 1)
            else:
                found[failure.code] = (index, match, line, 1)
    explanations = []
    for failure in classes:
        if failure.code not in found:
            continue
        index, match, line, count = found[failure.code]
        facts = {k: v for k, v in match.groupdict().items() if v is not None}
        site = user_site(lines, index)
        if site:
            facts["site"] = site
        root = next((code for code in failure.echo_of if code in found), None)
        fix = (
            f"follows from {root} (line {found[root][0] + 1}): its fix applies"
            if root
            else FIXERS[failure.fixer](facts, machine, context, framework)
        )
        explanations.append(
            Explanation(
                code=failure.code,
                title=failure.title,
                evidence=_evidence(line, match),
                line=index + 1,
                cause=failure.cause.format_map(_Missing(facts)),
                fix=fix,
                source=failure.source,
                seen_in=failure.seen_in,
                echo_of=root,
                occurrences=count,
            )
        )
    return sorted(explanations, key=lambda e: (e.echo_of is not None, e.line))


def explained(error: ErrorDetail, machine: Machine, context: Context) -> ErrorDetail:
    """A failed run's error with the known failures in its message and output."""
    return error.model_copy(
        update={"explanations": explain(f"{error.message or ''}\n{error.stderr_tail}", machine, context)}
    )


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return f"<{key}>"
