"""`gpuscout tune`'s report on the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.report import format as fmt
from gpuscout.tune.workload_results import AblationRow, Speedup, WorkloadTuneReport


def same_setting_spread(rows: list[AblationRow], tolerance: float = 0.10) -> list[str]:
    """Rows that ran the same setting (precision, XLA, data) but measured more than `tolerance`
    apart: the run-to-run noise on this machine, which makes smaller differences meaningless
    (on a busy CPU 'combined' read 0.45x where the identical 'tuned input' read 0.96x)."""
    notes, groups = [], {}
    for row in rows:
        if row.samples_per_s:
            groups.setdefault((row.precision, row.xla, row.data), []).append(row)
    for same in groups.values():
        low, high = min(same, key=lambda r: r.samples_per_s), max(same, key=lambda r: r.samples_per_s)
        if high.samples_per_s > (1 + tolerance) * low.samples_per_s:
            notes.append(
                f"'{low.label}' and '{high.label}' ran the same setting and measured "
                f"{fmt.number(low.samples_per_s)} and {fmt.number(high.samples_per_s)} samples/s: "
                f"differences under {high.samples_per_s / low.samples_per_s - 1:.0%} are noise on this "
                "machine (a busy host?); rerun with more --windows"
            )
    return notes


def _ratio(gain: Speedup | None) -> str:
    if not gain:
        return fmt.DASH
    ci = f" [{gain.ci95_low:.2f}–{gain.ci95_high:.2f}]" if gain.ci95_low is not None else ""
    return f"{gain.ratio:.2f}x{ci}"


def print_tune(report: WorkloadTuneReport, out: Console) -> None:
    out.print(
        f"[bold]gpuscout tune[/] {escape(report.workload)} on {escape(report.gpu or 'the CPU')} "
        f"({report.backend}), "
        f"session {report.session}, {report.elapsed_s / 60:.1f} min",
        highlight=False,
    )
    for note in report.notes:
        out.print(f"note: {note}", highlight=False, markup=False)
    ab = report.ablation
    measured = [row for row in (ab.rows if ab else []) if row.run_id or row.status != "skipped"]
    if measured:  # rows the --budget-minutes skipped are named once, under "skipped", not as empty rows
        t = Table(title="what each optimisation buys (speedup, 95% CI)", title_justify="left")
        for c in ("setting", "samples/s", "speedup", "over", "loss after N steps", "input wait", "run", "flags"):
            t.add_column(c)
        for row in measured:
            loss = row.loss
            loss_text = (
                fmt.DASH
                if not loss
                else (
                    f"{loss.value:.4g} vs {loss.baseline:.4g} @{loss.steps}"
                    + (" [red]changed[/]" if loss.changed else "")
                )
            )
            t.add_row(
                escape(row.label),
                fmt.number(row.samples_per_s),
                _ratio(row.speedup),
                escape(row.versus),
                loss_text,
                fmt.percent(row.input_wait_share),
                row.run_id or row.status,
                ", ".join(row.flags) or fmt.DASH,
            )
        out.print(t)
        for note in same_setting_spread(measured):
            out.print(f"note: {note}", highlight=False, markup=False)
        if any(row.flags for row in measured):
            out.print(
                "note: a flagged row's windows disagreed (docs/methodology.md, Flags): its speedup is less "
                "certain than its interval says; rerun with more --windows",
                highlight=False,
                markup=False,
            )
        if ab.note:
            out.print(f"note: {ab.note}", highlight=False, markup=False)
    batch = report.batch
    if batch and batch.curve:
        limit = {
            "memory": f"first out of memory at {batch.first_oom}",
            "cap": f"no OOM up to --max-batch {batch.cap}",
            "budget": "stopped by the --budget-minutes",
        }[batch.limited_by]
        out.print(
            f"[bold]largest batch[/]: {batch.largest} ({limit}; {len(batch.probes)} probes); knee: {batch.knee}",
            highlight=False,
        )
        t = Table(title="throughput against batch size", title_justify="left")
        for c in ("batch", "samples/s", "peak memory", "run"):
            t.add_column(c)
        for c in batch.curve:
            t.add_row(
                str(c.batch_size) + (" (knee)" if c.batch_size == batch.knee else ""),
                fmt.number(c.samples_per_s),
                fmt.bytes_(c.peak_memory_bytes),
                c.run_id,
            )
        out.print(t)
    inp = report.input
    if inp and inp.model_samples_per_s is not None:
        if inp.of_user_pipeline:
            alone = inp.pipeline.samples_per_s if inp.pipeline else None
            out.print(
                f"[bold]your pipeline[/]: {fmt.number(alone)} samples/s alone; the model takes "
                f"{fmt.number(inp.model_samples_per_s)}/s: "
                + ("[red]it would starve this GPU[/]" if inp.starves else "it keeps up")
                + f" ({escape(inp.verdict or fmt.DASH)}, "
                f"predicted wait {fmt.percent(inp.predicted_wait_share)})",
                highlight=False,
            )
        else:
            one, tuned = inp.pipeline_one_thread, inp.pipeline_tuned
            out.print(
                f"[bold]input[/]: pipeline alone {fmt.number(one and one.samples_per_s)} samples/s on one thread, "
                f"{fmt.number(tuned and tuned.samples_per_s)} tuned; "
                f"model alone {fmt.number(inp.model_samples_per_s)}; "
                f"together {fmt.number(inp.together_samples_per_s)} with {fmt.percent(inp.input_wait_share)} "
                f"of the time waiting for input: [bold]{escape(inp.verdict or fmt.DASH)}[/]; the model needs about "
                f"{inp.cores_needed or fmt.DASH} host core(s) of this pipeline",
                highlight=False,
            )
    if report.recommendations:
        out.print("[bold]recommendations[/] (largest measured gain first):")
        for i, rec in enumerate(report.recommendations, 1):
            out.print(f"{i}. {rec.title}: {_ratio(rec.gain)} — {rec.cost}", highlight=False, markup=False)
            out.print(f"   {rec.code}".replace("\n", "\n   "), highlight=False, markup=False)
    if report.skipped:
        out.print(f"[yellow]skipped (budget)[/]: {escape(', '.join(report.skipped))}", highlight=False)
