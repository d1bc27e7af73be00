"""Known failures found in a log (gpuscout.explain), on the terminal: under a failed run and
for `gpuscout doctor --explain`. Plain text (markup off): logs hold brackets."""

from __future__ import annotations

from rich.console import Console

from gpuscout.doctor.results import Explained


def print_explanations(out: Console, explanations: list, indent: str = "") -> None:
    """Each explanation (record.run.Explanation, or its dict as a sweep trial keeps it) as a
    numbered block, the roots first; an echo names the root it follows from."""
    rows = [e if isinstance(e, dict) else e.model_dump() for e in explanations]
    number = {row["code"]: i for i, row in enumerate(rows, 1)}
    for i, row in enumerate(rows, 1):
        echo = f" (follows from {number[row['echo_of']]})" if row.get("echo_of") in number else ""
        seen = f", {row['occurrences']} times" if row.get("occurrences", 1) > 1 else ""
        out.print(f"{indent}{i}. {row['title']}{echo} [{row['code']}]", markup=False, highlight=False)
        out.print(f"{indent}   line {row['line']}{seen}: {row['evidence']}", markup=False, highlight=False)
        out.print(f"{indent}   cause: {row['cause']}", markup=False, highlight=False)
        out.print(f"{indent}   fix: {row['fix']}", markup=False, highlight=False)
        if row.get("source"):
            out.print(f"{indent}   known from: {row['source']} ({row.get('seen_in')})", markup=False, highlight=False)


def print_explained(explained: Explained, out: Console) -> None:
    """`doctor --explain`: the failures found, the roots first; none found, this machine's checks."""
    from gpuscout.report.doctor import print_doctor

    found = explained.found
    if found:
        roots = sum(e.echo_of is None for e in found)
        out.print(
            f"{len(found)} known failure(s) in the log, {roots} root cause(s) first:", markup=False, highlight=False
        )
        print_explanations(out, found)
    else:
        out.print(
            f"no known failure in the {explained.lines} line(s) read; this machine as doctor sees it"
            + (":" if explained.report.get("started", True) else ", its frameworks not started:"),
            markup=False,
            highlight=False,
        )
        print_doctor(explained.report, out)
