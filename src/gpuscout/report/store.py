"""What the store holds and how it stands, on the terminal: `results list`, `results show`,
`results check` and `results salvage` (cli/emit.py picks these by the result's type)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from gpuscout.record import StoredRecord
from gpuscout.report import console as console_report
from gpuscout.report import watch as watch_report
from gpuscout.store.repair import CheckReport, SalvageReport
from gpuscout.store.tracked import TrackedRun


@dataclass(frozen=True)
class Listed:
    """The records a `results list` found, newest first."""

    records: list[StoredRecord]


@dataclass(frozen=True)
class Shown:
    """One record in full, and where it was sent (its MLflow runs)."""

    record: StoredRecord
    links: list[TrackedRun]


def print_listed(listed: Listed, out: Console) -> None:
    if not listed.records:
        out.print("no stored runs match")
    else:
        out.print(console_report.runs_table(listed.records))


def print_shown(shown: Shown, out: Console) -> None:
    record = shown.record
    if record.kind == "watch":
        watch_report.print_watch_record(out, record)
    else:
        console_report.print_run(out, record)
    for link in shown.links:  # where it went (issue 63: the MLflow run id in the store)
        whose = "your script's own run" if link.origin == "script" else "run"
        out.print(
            f"MLflow: {whose} {link.tracker_run_id} at {link.tracking_uri} ({link.logged_utc[:16]})", markup=False
        )


def print_check(report: CheckReport, out: Console) -> None:
    sqlite_ok = report.integrity == ["ok"]
    out.print(f"{report.path}", soft_wrap=True, markup=False)
    out.print(f"  SQLite integrity: {'ok' if sqlite_ok else 'DAMAGED'}", markup=False)
    for line in [] if sqlite_ok else report.integrity[:10]:
        out.print(f"    {line}", soft_wrap=True, markup=False)
    out.print(f"  records: {report.records} readable and valid; trials: {report.trials}", markup=False)
    for line in damage_lines(report) + list(filter(None, [recovered_line(report)])):
        out.print(f"  {line}", soft_wrap=True, markup=False)
    for what, why in list(report.invalid.items())[:20]:
        out.print(f"  {what} does not validate: {why}", soft_wrap=True, markup=False)
    if report.ok:
        out.print("  no damage found")
    else:
        out.print(
            f"  `gpuscout results salvage --store {report.path} --out NEW.sqlite` copies every "
            "readable record into a new store",
            soft_wrap=True,
            markup=False,
        )


def print_salvage(report: SalvageReport, out: Console) -> None:
    out.print(
        f"copied {report.records} record(s) and {report.trials} trial(s) from {report.source} into {report.out}",
        soft_wrap=True,
        markup=False,
    )
    if recovered_line(report):
        out.print(f"recovered: {recovered_line(report)}", soft_wrap=True, markup=False)
    for line in damage_lines(report):
        out.print(f"left behind: {line}", soft_wrap=True, markup=False)
    for what, why in report.invalid.items():
        out.print(f"left behind: {what}, which does not validate ({why})", soft_wrap=True, markup=False)


def damage_lines(report: CheckReport | SalvageReport) -> list[str]:
    """What a check or salvage found lost, one line each."""
    lines = []
    if report.lost_rows:
        lines.append(f"{report.lost_rows} row(s) on damaged pages, which cannot be read at all")
    if report.missing_pages:
        lines.append(
            f"{report.missing_pages} page(s) the file's header counts are missing from its end (the file was "
            "cut short): rows stored on them are lost"
        )
    return lines


def recovered_line(report: CheckReport | SalvageReport) -> str | None:
    if not report.from_pages:
        return None
    header = (
        (
            " (its header, the first 100 bytes with SQLite's mark, page size and freelist, is damaged: they were "
            "read without it)"
        )
        if report.header_damaged
        else ""
    )
    return f"{report.from_pages} row(s) SQLite could no longer reach were read from their pages{header}"
