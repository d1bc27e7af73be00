"""`gpuscout tune`'s report on the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout.report import format as fmt


def same_setting_spread(rows: list[dict], tolerance: float = 0.10) -> list[str]:
    """Rows that ran the same setting (precision, XLA, data) but measured more than `tolerance`
    apart: the run-to-run noise on this machine, which makes smaller differences meaningless
    (on a busy CPU 'combined' read 0.45x where the identical 'tuned input' read 0.96x)."""
    notes, groups = [], {}
    for row in rows:
        if row.get("samples_per_s"):
            groups.setdefault((row.get("precision"), row.get("xla"), row.get("data")), []).append(row)
    for same in groups.values():
        low, high = min(same, key=lambda r: r["samples_per_s"]), max(same, key=lambda r: r["samples_per_s"])
        if high["samples_per_s"] > (1 + tolerance) * low["samples_per_s"]:
            notes.append(
                f"'{low['label']}' and '{high['label']}' ran the same setting and measured "
                f"{fmt.number(low['samples_per_s'])} and {fmt.number(high['samples_per_s'])} samples/s: "
                f"differences under {high['samples_per_s'] / low['samples_per_s'] - 1:.0%} are noise on this "
                "machine (a busy host?); rerun with more --windows"
            )
    return notes


def _ratio(gain: dict | None) -> str:
    if not gain:
        return fmt.DASH
    ci = f" [{gain['ci95_low']:.2f}–{gain['ci95_high']:.2f}]" if gain.get("ci95_low") is not None else ""
    return f"{gain['ratio']:.2f}x{ci}"


def print_tune(report: dict, out: Console) -> None:
    out.print(
        f"[bold]gpuscout tune[/] {escape(report['workload'])} on {escape(report['gpu'] or 'the CPU')} "
        f"({report['backend']}), "
        f"session {report['session']}, {report['elapsed_s'] / 60:.1f} min",
        highlight=False,
    )
    for note in report["notes"]:
        out.print(f"note: {note}", highlight=False, markup=False)
    ab = report.get("ablation")
    measured = [row for row in (ab or {}).get("rows", []) if row["run_id"] or row["status"] != "skipped"]
    if measured:  # rows the --budget skipped are named once, under "skipped", not as empty rows
        t = Table(title="what each optimisation buys (speedup, 95% CI)", title_justify="left")
        for c in ("setting", "samples/s", "speedup", "over", "loss after N steps", "input wait", "run", "flags"):
            t.add_column(c)
        for row in measured:
            loss = row["loss"]
            loss_text = (
                fmt.DASH
                if not loss
                else (
                    f"{loss['value']:.4g} vs {loss['baseline']:.4g} @{loss['steps']}"
                    + (" [red]changed[/]" if loss["changed"] else "")
                )
            )
            t.add_row(
                escape(row["label"]),
                fmt.number(row["samples_per_s"]),
                _ratio(row["speedup"]),
                escape(row["versus"]),
                loss_text,
                fmt.percent(row["input_wait_share"]),
                row["run_id"] or row["status"],
                ", ".join(row.get("flags") or []) or fmt.DASH,
            )
        out.print(t)
        for note in same_setting_spread(measured):
            out.print(f"note: {note}", highlight=False, markup=False)
        if any(row.get("flags") for row in measured):
            out.print(
                "note: a flagged row's windows disagreed (docs/methodology.md, Flags): its speedup is less "
                "certain than its interval says; rerun with more --windows",
                highlight=False,
                markup=False,
            )
        if ab.get("note"):
            out.print(f"note: {ab['note']}", highlight=False, markup=False)
    batch = report.get("batch")
    if batch and batch.get("curve"):
        limit = {
            "memory": f"first out of memory at {batch.get('first_oom')}",
            "cap": f"no OOM up to --max-batch {batch.get('cap')}",
            "budget": "stopped by the --budget",
        }[batch["limited_by"]]
        out.print(
            f"[bold]largest batch[/]: {batch['largest']} ({limit}; {len(batch['probes'])} probes); "
            f"knee: {batch['knee']}",
            highlight=False,
        )
        t = Table(title="throughput against batch size", title_justify="left")
        for c in ("batch", "samples/s", "peak memory", "run"):
            t.add_column(c)
        for c in batch["curve"]:
            t.add_row(
                str(c["batch_size"]) + (" (knee)" if c["batch_size"] == batch["knee"] else ""),
                fmt.number(c["samples_per_s"]),
                fmt.bytes_(c["peak_memory_bytes"]),
                c["run_id"],
            )
        out.print(t)
    inp = report.get("input")
    if inp and inp.get("model_samples_per_s") is not None:
        if "pipeline" in inp:
            p = inp["pipeline"] or {}
            out.print(
                f"[bold]your pipeline[/]: {fmt.number(p.get('samples_per_s'))} samples/s alone; the model takes "
                f"{fmt.number(inp['model_samples_per_s'])}/s: "
                + ("[red]it would starve this GPU[/]" if inp.get("starves") else "it keeps up")
                + f" ({escape(inp.get('verdict') or fmt.DASH)}, "
                f"predicted wait {fmt.percent(inp.get('predicted_wait_share'))})",
                highlight=False,
            )
        else:
            one, tuned = inp.get("pipeline_one_thread") or {}, inp.get("pipeline_tuned") or {}
            out.print(
                f"[bold]input[/]: pipeline alone {fmt.number(one.get('samples_per_s'))} samples/s on one thread, "
                f"{fmt.number(tuned.get('samples_per_s'))} tuned; "
                f"model alone {fmt.number(inp['model_samples_per_s'])}; "
                f"together {fmt.number(inp['together_samples_per_s'])} with {fmt.percent(inp['input_wait_share'])} "
                f"of the time waiting for input: [bold]{escape(inp['verdict'] or fmt.DASH)}[/]; the model needs about "
                f"{inp['cores_needed'] or fmt.DASH} host core(s) of this pipeline",
                highlight=False,
            )
    if report["recommendations"]:
        out.print("[bold]recommendations[/] (largest measured gain first):")
        for i, rec in enumerate(report["recommendations"], 1):
            out.print(f"{i}. {rec['title']}: {_ratio(rec['gain'])} — {rec['cost']}", highlight=False, markup=False)
            out.print(f"   {rec['code']}".replace("\n", "\n   "), highlight=False, markup=False)
    if report["skipped"]:
        out.print(f"[yellow]skipped (budget)[/]: {escape(', '.join(report['skipped']))}", highlight=False)
