"""What `recommend` answers: the job ranked on every GPU, what makes the ranking mean less than it
seems, and from a stored run, what it predicts of that run; and the answers that are no answer (a
deadline or a budget no GPU meets), which are bad input, said with the closest there is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuscout.core.units import usd
from gpuscout.recommend.caveats import cannot_judge, caveats
from gpuscout.recommend.from_run import Recommendation
from gpuscout.recommend.jobs import Job
from gpuscout.recommend.ranking import Constraints, Row


@dataclass(frozen=True)
class Advice:
    job: Job
    rows: list[Row]
    constraints: Constraints
    scenario: str
    answer: Recommendation | None = None  # --from RUN: what the run's own measurement predicts
    top: int | None = None  # the rows the terminal shows
    long: bool = False  # every column on the terminal

    @property
    def notes(self) -> list[str]:
        return caveats(self.job, self.rows)

    @property
    def lead(self) -> str | None:
        """Said before the answer: the run cannot judge a GPU (recommend/caveats.cannot_judge)."""
        return cannot_judge(self.job)

    @property
    def unpriced(self) -> list[Row]:
        """Rows past --top that train it and have no price to rank by: named, never lost."""
        rows = self.rows[self.top :] if self.top is not None else []
        return [r for r in rows if r.fits and r.eligible and r.hourly is None and r.throughput is not None]

    def as_json(self) -> dict[str, Any]:
        job = self.job
        return {
            "job": {k: v for k, v in job.__dict__.items() if k not in ("references", "measured", "scaling")}
            | {
                "scaling": [
                    {"gpu": gpu, "gpus": k, "efficiency": eff, "basis": label}
                    for (gpu, k), (eff, label) in job.scaling.items()
                ]
            }
            | {"precision": job.precision.value, "references": [r.label for r in job.references]},
            "scenario": self.scenario,
            "cannot_judge": self.lead,
            "caveats": self.notes,
            "rows": [r.to_dict() for r in self.rows],
        } | (self.answer.to_dict() if self.answer else {})


def unreachable(advice: Advice, deadline: str | None, max_gpus: int) -> str | None:
    """Why no GPU answers the job as asked (a deadline or a budget none meets), with the closest
    there is and what to change; None when some GPU does."""
    job, rows, constraints = advice.job, advice.rows, advice.constraints
    deadline_h = constraints.deadline_h
    if deadline_h and not any(r.eligible or (r.hours is not None and r.hours <= deadline_h) for r in rows):
        timed = [r for r in rows if r.hours is not None]
        closest = min(timed, key=lambda r: r.hours or 0.0) if timed else None
        return (
            f"no GPU in the catalog trains {job.name} within {deadline}"
            + (f": the closest is {closest.gpus}x {closest.gpu.name} at {closest.hours:,.1f} h" if closest else "")
            + f" (with up to {max_gpus} GPUs; raise --max-gpus or the deadline)"
        )
    budgeted = constraints.budget_usd_per_hour is not None or constraints.budget_usd_total is not None
    if budgeted and not any(r.eligible and r.fits for r in rows):
        priced = [r for r in rows if r.fits and r.cost_usd is not None] or [r for r in rows if r.fits and r.hourly]
        cheapest = min(priced, key=lambda r: r.cost_usd if r.cost_usd is not None else r.usd_per_hour, default=None)
        return (
            f"no GPU in the catalog trains {job.name} within the budget"
            + (
                f": the cheapest is {cheapest.gpus}x {cheapest.gpu.name} at {cheapest.usd_per_hour:.2f} USD/h"
                + (f", {usd(cheapest.cost_usd)} in all" if cheapest.cost_usd is not None else "")
                if cheapest
                else ""
            )
            + "; raise the budget"
        )
    return None
