"""The report's section of watched scripts (report/watched_sections.py) on records made by hand."""

from gpuscout.report import watched_sections
from tests.records import fit_events, make_watch_record


def test_a_command_that_called_no_fit_is_counted_not_given_rows():
    """Issue 87, item 11: `watch -- python -c "print()"` five times made five junk rows. A run that
    ended well with no fit is counted in a line; one that failed before its fit keeps its row."""
    trained = make_watch_record("trained01", fit_events())
    idle = [make_watch_record(f"idle{i:04d}", [{"event": "watch_hooked", "pid": 100}]) for i in range(5)]
    crashed = make_watch_record("crashed01", [{"event": "watch_hooked", "pid": 100}], status="failed", exit_code=1)
    assert all(r.ok and not r.fits for r in idle) and not crashed.ok
    section = watched_sections.watched([trained, *idle, crashed])
    runs = next(t for t in section.tables if any("trained01" in " ".join(row) for row in t.rows))
    shown = {
        row_id for row in runs.rows for row_id in ("trained01", "crashed01", "idle0000") if row_id in " ".join(row)
    }
    assert shown == {"trained01", "crashed01"}
    assert any(
        t.startswith("5 runs whose command called no Keras fit (nothing to time) are left out") for t in section.text
    )
    (summary,) = section.summary
    assert summary.rows[0][1] == "2"  # the script's runs: the trained one and the crash
