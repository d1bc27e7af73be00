"""Terminal tables for bench results and stored runs."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuscout import workloads
from gpuscout.core.units import counted
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord
from gpuscout.report import format as fmt
from gpuscout.report import terminal
from gpuscout.report import watch as watch_report
from gpuscout.report.explain import print_explanations

_STATUS_STYLE = {"ok": "green", "oom": "yellow", "failed": "red", "timeout": "red", "not_reached": "yellow"}


def _batch(r: RunRecord) -> str:
    return f"{r.batch_size}x{r.seq_len}" if r.seq_len else str(r.batch_size)


def _throughput(r: RunRecord) -> str:
    t = r.throughput
    if not t:
        return fmt.DASH
    ci = f" [{fmt.number(t.ci95_low)}–{fmt.number(t.ci95_high)}]" if t.ci95_low is not None else ""
    return f"{fmt.number(t.median)}{ci} {r.unit}"


def print_workloads(console: Console) -> None:
    """`bench --list`: each workload with its defaults."""
    for name in workloads.names():
        w = workloads.get(name)
        seq = f", sequence {w.default_seq_len} (max {w.max_seq_len})" if w.is_sequence else ""
        console.print(
            f"{name:16} {w.description} (default batch {w.default_batch_size}{seq}; {w.unit}/s)",
            highlight=False,
            markup=False,
        )


def bench_table(records: list[RunRecord]) -> Table:
    table = Table(title="gpuscout bench", title_justify="left", header_style="bold")
    for name, justify in (
        ("id", "left"),
        ("workload", "left"),
        ("config", "left"),
        ("batch", "right"),
        ("status", "left"),
        ("throughput (median [95% CI])", "right"),
        ("CV", "right"),
        ("step", "right"),
        ("epoch", "right"),
        ("compile", "right"),
        ("peak mem", "right"),
        ("MFU", "right"),
        ("power", "right"),
    ):
        table.add_column(name, justify=justify, overflow="fold")
    for r in records:
        power = r.telemetry.power_mean_w if r.telemetry else None
        table.add_row(
            r.id,
            r.workload,
            fmt.config(r),
            _batch(r),
            f"[{_STATUS_STYLE.get(r.status, 'white')}]{r.status}[/]",
            _throughput(r),
            fmt.percent(r.throughput.cv if r.throughput else None, 2),
            fmt.seconds(r.step_time_s),
            fmt.seconds(r.epoch_time_s),
            fmt.seconds(r.compile_s),
            fmt.bytes_(r.peak_memory_bytes),
            fmt.percent(r.mfu),
            fmt.DASH if power is None else f"{power:.0f} W",
        )
    return table


def print_bench(console: Console, records: list[RunRecord], summaries: list[dict]) -> None:
    """The table, then one line per flag (with its hint) and per failed run (with its stderr)."""
    console.print(bench_table(records))
    for r in records:
        print_flags_and_error(console, r)
    for r in records:
        if r.time_to_accuracy:
            console.print(accuracy_line(r), highlight=False)
    for s in summaries:
        t = s["throughput"]
        console.print(
            f"across {counted(t['n'], 'run')} of {s['workload']} ({s['backend']} {s['precision']}): "
            f"{t['method'].replace('_', ' ')} {fmt.number(t['centre'])} {s['unit']}, "
            f"range {fmt.number(t['min'])}–{fmt.number(t['max'])}, CV {fmt.percent(t['cv'], 2)}",
            markup=False,
        )


def print_flags_and_error(console: Console, r: RunRecord) -> None:
    """A run's flags with their hints, and a failed run's error: its message, the last lines of its
    output and what `doctor --explain` makes of them."""
    for flag in r.flags:
        console.print(f"[yellow]warning[/] {escape(r.id)} {flag.code}: {escape(flag.message)} — {escape(flag.hint)}")
    if not r.ok and r.error:
        console.print(f"[red]{r.status}[/] {escape(r.id)} {escape(r.workload)}: {escape(r.error.message or '')}")
        for line in (r.error.stderr_tail or "").strip().splitlines()[-5:]:
            console.print(f"    {line}", markup=False, highlight=False)
        if r.error.explanations:
            console.print("  what it means (gpuscout doctor --explain):", markup=False, highlight=False)
            print_explanations(console, r.error.explanations, indent="  ")


def accuracy_line(r: RunRecord) -> str:
    tta = r.time_to_accuracy
    curve = ", ".join(f"{p.val_accuracy:.3f}" for p in tta.curve)
    head = (
        f"reached {tta.target:g} in {fmt.seconds(tta.seconds)} ({counted(tta.epochs, 'epoch')})"
        if tta.reached
        else f"did not reach {tta.target:g} in {counted(tta.epochs, 'epoch')} (best {tta.best_val_accuracy:.4f})"
    )
    return f"time to accuracy {r.id} {r.workload}: {head}; validation accuracy by epoch: {curve}"


def runs_table(records: list[StoredRecord]) -> Table:
    """Benchmark runs and watched scripts (`gpuscout watch`), newest first, one row each."""
    table = Table(title="stored runs", title_justify="left", header_style="bold")
    for name in ("id", "created (UTC)", "workload", "config", "batch", "device", "status", "throughput"):
        table.add_column(name)
    for r in records:
        if r.kind == "watch":
            table.add_row(*(escape(cell) for cell in watch_report.row(r)))
            continue
        device = (r.gpu.name if r.gpu else None) or r.device
        table.add_row(
            r.id, r.created_utc, escape(r.workload), fmt.config(r), _batch(r), device, r.status, _throughput(r)
        )
    return terminal.detail(table, "created (UTC)", "config", "batch")


def print_run(console: Console, r: RunRecord) -> None:
    console.print(bench_table([r]))
    env = r.env
    framework = env.framework
    lines = [
        ("created", r.created_utc),
        ("GPU", (r.gpu.name if r.gpu else None) or "none (CPU run)"),
        ("driver / CUDA (driver)", f"{env.driver_version or fmt.DASH} / {env.cuda_driver_version or fmt.DASH}"),
        (
            "backend",
            f"{r.backend.value} {(framework.backend_version if framework else None) or ''} "
            f"(keras {(framework.keras_version if framework else None) or fmt.DASH})",
        ),
        (
            "CUDA / cuDNN (framework)",
            f"{(framework.cuda_version if framework else None) or fmt.DASH} / "
            f"{(framework.cudnn_version if framework else None) or fmt.DASH}",
        ),
        ("compiled", env.compiled or fmt.DASH),
        (
            "compilation cache",
            fmt.DASH
            if r.compilation_cache is None
            # a sweep's trials share one
            else f"{r.compilation_cache.hits} of {r.compilation_cache.programs} programs loaded, the others compiled",
        ),
        (
            "achieved",
            f"{fmt.number(r.achieved_tflops, 2)} TFLOP/s"
            + (f" of {r.mfu_peak_tflops} ({r.mfu_peak_path} dense peak)" if r.mfu_peak_tflops else ""),
        ),
        ("windows", ", ".join(fmt.number(w.throughput) for w in r.windows) or fmt.DASH),
        ("CPU", f"{env.cpu_model or fmt.DASH} x {env.cpu_count or fmt.DASH}"),
        ("gpuscout / methodology", f"{r.gpuscout_version} / {r.methodology_version}"),
        ("command", env.command_line or fmt.DASH),
    ]
    for key, value in lines:
        console.print(f"[bold]{escape(key)}[/]: {escape(str(value))}", highlight=False)
    if r.time_to_accuracy:
        console.print(escape(accuracy_line(r)), highlight=False)
    print_flags_and_error(console, r)  # `scale` and `bench` send the user here for a run's error


def _agreement(r: RunRecord) -> str:
    a = r.inference.agreement if r.inference else None
    if not a:
        return fmt.DASH
    if a.accuracy is not None:
        return f"acc {a.accuracy:.3f} (fp32 {a.reference_accuracy:.3f})"
    return f"top-1 {a.top1_agreement:.1%}, max |Δ| {a.max_abs_diff:.2g}"


def inference_table(records: list[RunRecord]) -> Table:
    """Latency percentiles and throughput per batch size, and each format against fp32 Keras."""
    table = Table(
        title="gpuscout bench --mode inference (latency of single synchronised requests)",
        title_justify="left",
        header_style="bold",
    )
    for name in (
        "id",
        "workload",
        "format",
        "batch",
        "status",
        "p50",
        "p90",
        "p99",
        "max",
        "throughput [95% CI]",
        "vs fp32 Keras",
        "prepare",
    ):
        table.add_column(name, overflow="fold")
    for r in records:
        lat = r.inference.latency if r.inference else None
        ms = lambda k, lat=lat: fmt.DASH if lat is None else f"{getattr(lat, k):.2f} ms"  # noqa: E731
        serving = r.inference.serving if r.inference else None
        table.add_row(
            r.id,
            r.workload,
            fmt.config(r),
            _batch(r),
            f"[{_STATUS_STYLE.get(r.status, 'white')}]{r.status}[/]",
            ms("p50_ms"),
            ms("p90_ms"),
            ms("p99_ms"),
            ms("max_ms"),
            _throughput(r),
            _agreement(r),
            fmt.seconds(serving.prepare_s if serving else None),
        )
    return table


def print_inference(console: Console, records: list[RunRecord], verdicts: list[dict]) -> None:
    console.print(inference_table(records))
    for r in records:
        load = r.inference.load_test if r.inference else None
        if load:
            console.print(
                f"load test {r.id} ({fmt.config(r)}): {load.clients} clients x batch {load.batch_size} "
                f"for {load.seconds:.1f} s: {fmt.number(load.samples_per_s)} samples/s, p50 "
                f"{load.latency.p50_ms:.2f} ms, p99 {load.latency.p99_ms:.2f} ms over "
                f"{load.requests} requests" + ("" if load.thread_safe else " (one interpreter: requests queue)"),
                highlight=False,
                markup=False,
            )
        path = r.inference.input_path if r.inference else None
        if path:
            timings = ", ".join(f"{m} {ms:.2f} ms" for m, ms in path.copy_ms.items())
            console.print(
                f"input copy {r.id} (batch {r.batch_size}): {path.method}, the fastest of {timings}",
                highlight=False,
                markup=False,
            )
        if not r.ok and r.error:
            console.print(f"[red]{r.status}[/] {escape(r.id)}: {escape(r.error.message or '')}")
            print_explanations(console, r.error.explanations, indent="  ")
    for v in verdicts:
        where = f"{v['workload']} {v['format']} {v['variant']}"
        if v["best"]:
            b = v["best"]
            console.print(
                f"p99 <= {v['target_ms']:g} ms for {where}: batch {b['batch_size']} gives the most, "
                f"{fmt.number(b['samples_per_s'])} samples/s at p99 {b['latency']['p99_ms']:.2f} ms",
                highlight=False,
                markup=False,
            )
