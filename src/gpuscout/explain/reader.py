"""Finding the known failures in a log, the root cause first."""

from __future__ import annotations

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


def _evidence(line: str, match: re.Match) -> str:
    line = line.strip()
    if len(line) <= EVIDENCE_CHARS:
        return line
    start = max(0, match.start() - 40)
    return ("…" if start else "") + line[start : start + EVIDENCE_CHARS] + "…"


def explain(text: str, machine: Machine, context: Context | None = None) -> list[Explanation]:
    """Every known failure in `text`: roots in the order they first appear, then the failures
    that follow from a root found in the same text (`echo_of`)."""
    context = context or Context()
    framework = framework_of(text, context, machine)
    lines = [line[:MAX_LINE_CHARS] for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    found: dict[str, tuple[int, re.Match, str, int]] = {}  # code -> (line index, match, line, occurrences)
    classes = failure_classes()
    for index, line in enumerate(lines):
        for failure in classes:
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
