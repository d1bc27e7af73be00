"""Which stored run went to which experiment tracker's run: the `tracked_runs` table (issue 63:
the store id in MLflow, and the MLflow run id in the store). One row per (run, tracker, tracker
run); `origin` says who made the tracker's run: gpuscout (`--mlflow`) or the user's own script
(`mlflow.autolog()` or an active run, which watch saw and adds its figures to).

Additive like `trials`: created with IF NOT EXISTS on every open, so no schema version bump.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from gpuscout.store.failures import sqlite_errors

TRACKED_SQL = """
CREATE TABLE IF NOT EXISTS tracked_runs (
    run_id TEXT NOT NULL,
    tracker TEXT NOT NULL,
    tracking_uri TEXT NOT NULL,
    experiment_id TEXT,
    tracker_run_id TEXT NOT NULL,
    origin TEXT NOT NULL,
    logged_utc TEXT NOT NULL,
    PRIMARY KEY (run_id, tracking_uri, tracker_run_id)
)
"""


@dataclass(frozen=True)
class TrackedRun:
    run_id: str  # the store's
    tracker: str  # "mlflow"
    tracking_uri: str
    experiment_id: str | None
    tracker_run_id: str
    origin: str  # "gpuscout": made by --mlflow; "script": the user's script's own run
    logged_utc: str


class TrackedTable:
    """Store's tracker-link methods, over the store's connection and transactions (see TrialTable)."""

    @sqlite_errors
    def mark_tracked(self, links: list[TrackedRun]) -> None:
        """The links, in one transaction."""
        with self._transaction():
            # TrackedRun's fields are the table's columns, in order
            self._db.executemany(
                "INSERT OR REPLACE INTO tracked_runs VALUES (?, ?, ?, ?, ?, ?, ?)", map(astuple, links)
            )

    @sqlite_errors
    def tracked(self, run_id: str) -> list[TrackedRun]:
        """The tracker runs of one stored run, oldest first (none in a store older than the table)."""
        if not self._has_table("tracked_runs"):  # a read-only open of an older store
            return []
        rows = self._db.execute(
            "SELECT * FROM tracked_runs WHERE run_id = ? ORDER BY logged_utc, tracker_run_id", (run_id,)
        ).fetchall()
        return [TrackedRun(*row) for row in rows]
