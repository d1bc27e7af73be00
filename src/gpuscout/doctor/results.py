"""What `doctor` hands back: the machine's checks, or a log's failures explained beside them."""

from __future__ import annotations

from typing import Any, NamedTuple

from gpuscout.record.run import Explanation


class DoctorResult(NamedTuple):
    """The checks of this machine (checks.run_doctor's report)."""

    report: dict[str, Any]

    @property
    def failed(self) -> bool:
        return any(c["status"] == "fail" for c in self.report["checks"])


class Explained(NamedTuple):
    """A pasted log's known failures (gpuscout.explain), the roots first, and the machine's
    checks they were explained for."""

    found: list[Explanation]
    lines: int  # the log's lines read
    report: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "explanations": [e.model_dump() for e in self.found],
            "recognised": bool(self.found),
            "lines": self.lines,
            "doctor": self.report,
        }
