"""`gpuscout watch` on the terminal: the verdict after the command ran, and watch records in
`results list/show` (report/watch_live.py: the view while it runs)."""

from __future__ import annotations

import shlex
import textwrap
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from gpuscout.analysis import devices, epoch_causes, epoch_clock
from gpuscout.analysis.device_causes import NOT_CHECKED_ON_CPU
from gpuscout.core.units import counted
from gpuscout.record.watch import WatchRecord
from gpuscout.report import format as fmt
from gpuscout.report.explain import print_explanations

if TYPE_CHECKING:
    pass

# The causes `gpuscout tune -- COMMAND` has a change for (tune/script.py)
TUNABLE = {"input_bound", "input_handover", "host_bound", "fp32_on_tensor_cores", "xla_off", "unused_memory"}
_STATUS_STYLE = {"ok": "green", "stopped": "green", "failed": "red", "interrupted": "yellow"}


def _headline(r: WatchRecord) -> str:
    how = {
        "ok": "ran to its end",
        "failed": f"failed (exit code {r.exit_code})",
        "interrupted": f"interrupted ({'Ctrl-C' if r.interrupted_by in (None, 'SIGINT') else r.interrupted_by})",
        "stopped": f"stopped after {r.limit} as asked; the rest of the script did not run",
    }[r.status]
    what = f"{r.workload} (pid {r.attached_pid})" if r.mode == "pid" else r.workload
    return f"{what}: watched {fmt.seconds(r.duration_s)}, {how}"


def _figures(r: WatchRecord) -> list[str]:
    main = max(r.fits, key=lambda f: f.steps, default=None)
    lines = []
    if main and r.windows:
        t = r.throughput
        what = "your loop" if main.custom else f"fit {main.index}"
        batch = f" of batch {main.batch_size}" if main.batch_size else ""
        lines.append(f"{what}: {main.steps} steps{batch}, step {fmt.seconds(r.step_time_s)}")
        if r.warmup_windows:
            lines.append(
                f"warm-up left out: {r.warmup_steps} steps ({r.warmup_windows} window"
                f"{'s' if r.warmup_windows > 1 else ''}) after the compile; the figures are of the "
                f"{sum(w.steps for w in r.steady)} steady steps"
            )
        lines += _throughput(r)
        if not main.custom:
            lines.append(
                f"of the steps' time: input wait {fmt.percent(r.input_wait_share)}, between steps (callbacks' "
                f"batch hooks, Keras' loop) {fmt.percent(r.outside_step_share)}; compile {fmt.seconds(main.compile_s)}"
            )
            lines.append(
                f"{main.backend}, {main.precision_policy}, {_xla(r, main)}, steps_per_execution "
                f"{main.steps_per_execution}"
            )
            lines.append(f"input: {_input(main)}; model {main.model}, {main.params or 0:,} params")
            if main.replicas > 1 or (main.devices or 0) > 1:
                lines.append(_devices(main))
            callbacks = _callback_costs(main)
            if callbacks:
                lines.append(f"callbacks: {callbacks}")
    t = r.telemetry
    if r.startup_s is not None:
        lines.append(f"start-up {fmt.seconds(r.startup_s)} before the GPU was first busy (not counted as idle)")
    if t is not None:
        util = None if t.gpu_util_mean_pct is None else t.gpu_util_mean_pct / 100
        power = f", {t.power_mean_w:.0f} W" if t.power_mean_w is not None else ""
        lines.append(f"{r.gpu_label}: busy {fmt.percent(util, 0)}, {_memory(r, main)}{power}")
    if r.mfu is not None:
        lines.append(f"MFU {fmt.percent(r.mfu)} ({fmt.number(r.achieved_tflops, 2)} of {r.mfu_peak_tflops:g} TFLOP/s)")
    return lines


def _throughput(r: WatchRecord) -> list[str]:
    """The one figure called throughput, the user's clock: samples over the steady epochs' wall
    time (validation, callbacks and the time between epochs in); then the training steps' own,
    named so, with what else each epoch held. Without two whole epochs, the steps' figure is the
    throughput, and says what it leaves out."""
    steady = r.steady
    seconds = sum(w.seconds for w in steady)
    samples = sum(w.samples or 0 for w in steady)
    steps_rate = samples / seconds if seconds > 0 and samples else None
    clock = r.clock
    if clock is None or not clock.samples_per_s:
        if steps_rate is None:
            return []
        return [
            f"throughput {fmt.number(steps_rate, 0)} samples/s of the training steps alone: no whole epoch after "
            "the first ran, so validation and the epoch's end are not in it"
        ]
    low, high = epoch_clock.rate_ci95(clock)
    ci = f", 95% CI {fmt.number(low, 0)}-{fmt.number(high, 0)}" if low is not None else ""
    epochs = len(clock.steady)
    lines = [
        f"throughput {fmt.number(clock.samples_per_s, 0)} samples/s by its whole epochs ({epochs} after the "
        f"first{ci}; validation, callbacks and the time between epochs in), {fmt.seconds(clock.epoch_s)} an epoch"
    ]
    if steps_rate is not None:
        p = epoch_causes.parts(clock)
        lines.append(
            f"the training steps alone: {fmt.number(steps_rate, 0)} samples/s; of each epoch: "
            f"{epoch_causes.described(p, epochs)}"
        )
    return lines


def _devices(main) -> str:
    """Where the step ran, and its batch per device: what multi-device verdicts rest on."""
    on = f"{main.replicas} of {main.devices}" if main.devices else f"{main.replicas}"
    how = f" ({main.strategy})" if main.strategy else ""
    each = devices.per_device_batch(main)
    batch = f"; batch {main.batch_size} global, {each} per device" if each is not None else ""
    return f"devices: the step ran on {on}{how}{batch}"


def _xla(r: WatchRecord, main) -> str:
    """What the script ran, as Keras resolved it (model.jit_compile after compile)."""
    if main.jit_compile:
        return "XLA"
    if main.backend == "tensorflow" and r.gpu is None:
        return "no XLA (Keras' default on a CPU-only TensorFlow)"
    return "no XLA (jit_compile=False)"


def _input(main) -> str:
    if main.input_workers is None:
        return main.input_type or fmt.DASH
    kind = "processes" if main.input_multiprocessing else "threads"
    return f"{main.input_type} ({counted(main.input_workers, 'worker ' + kind[:-1], 'worker ' + kind)})"


def _callback_costs(main) -> str | None:
    """Host time in the user's callbacks, per epoch; None when none took a millisecond."""
    epochs = [e for e in main.epochs if e.callbacks_s]
    totals: dict[str, float] = {}
    for e in epochs:
        for name, seconds in e.callbacks_s.items():
            totals[name] = totals.get(name, 0.0) + seconds
    shown = [
        (n, s / len(epochs)) for n, s in sorted(totals.items(), key=lambda item: -item[1]) if s / len(epochs) >= 1e-3
    ]
    parts = (
        [", ".join(f"{n} {fmt.seconds(s)} per epoch" for n, s in shown)]
        if shown
        else ["under 1 ms per epoch"]
        if epochs
        else []
    )
    if main.sync_callbacks:
        parts.append(
            f"{', '.join(main.sync_callbacks)} made Keras wait for each step's logs (that wait is counted in the step)"
        )
    return "; ".join(parts) or None


def _memory(r: WatchRecord, main) -> str:
    """The two memory figures named apart: what the framework's allocator used at its peak, and
    NVML's, which under JAX's preallocation is what JAX reserved, not what the training used."""
    from gpuscout.analysis.device_causes import jax_preallocated

    nvml = r.telemetry.memory_used_max_bytes if r.telemetry else None
    used = main.peak_memory_bytes if main else None
    parts = [f"used at peak {fmt.bytes_(used)} (allocator)"] if used else []
    if nvml is not None:
        parts.append(
            f"{fmt.bytes_(nvml)} reserved by JAX's preallocation (NVML)"
            if jax_preallocated(r)
            else f"{'NVML peak' if used else 'used at peak (NVML)'} {fmt.bytes_(nvml)}"
        )
    return ", ".join(parts) or "memory not seen"


def _wrapped(console: Console, text: str, indent: str, first: str | None = None, style: str = "") -> None:
    """`text` wrapped at the console's width under a hanging indent; words never split (a
    number stays whole), no trailing spaces for a log file."""
    width = max(console.width, 40)
    first = indent if first is None else first
    for line in textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ):
        console.print(Text(line, style=style), soft_wrap=True)


def print_watch(console: Console, r: WatchRecord) -> None:
    """The figures, then the verdict ranked by what each cause could save."""
    style = _STATUS_STYLE.get(r.status, "white")
    _wrapped(console, _headline(r), "  ", "", style=f"bold {style}")
    if r.tune_change is not None or r.applied:
        applied = "; ".join(r.applied.values()) or "nothing in the script to apply it to"
        _wrapped(console, f"tune session {r.group_id}, change {r.tune_change}: {applied}", "    ", "  ")
    for line in _figures(r):
        _wrapped(console, line, "    ", "  ")
    for note in r.notes:
        _wrapped(console, f"note: {note}", "    ", "  ", style="yellow")
    if r.error and r.error.stderr_tail.strip():
        console.print(Text("  the command's last lines on stderr:", style="red"))
        for line in r.error.stderr_tail.strip().splitlines()[-5:]:
            console.print(Text(f"    {line}"), soft_wrap=True)
    if r.error and r.error.explanations:
        console.print(Text("  what it means (gpuscout doctor --explain):", style="red"))
        print_explanations(console, r.error.explanations, indent="  ")
    console.print(Text("verdict, ranked by the time each could save:", style="bold"))
    for number, cause in enumerate(r.verdict, 1):
        saving = f" (could save up to {cause.saving_share:.0%})" if cause.saving_share else ""
        _wrapped(console, cause.message + saving, "   ", f"{number}. ", style="bold")
        _wrapped(console, f"seen: {cause.evidence}", "     ", "   ")
        _wrapped(console, f"change: {cause.fix}", "     ", "   ")
        for line in (cause.code_snippet or "").splitlines():  # code is never wrapped
            console.print(Text(f"       {line}".rstrip(), style="green"), soft_wrap=True)
    if r.gpu is None and r.mode == "command":  # what the verdict could not look at, said (issue 62, item 7)
        _wrapped(console, NOT_CHECKED_ON_CPU, "  ", "")
    if r.mode == "command" and r.tune_change is None and any(c.code in TUNABLE for c in r.verdict):
        _wrapped(
            console,
            "measure what these changes buy on your script, each applied to it unchanged: "
            f"gpuscout tune -- {shlex.join(r.command) if len(r.command) > 1 else r.command[0]}",
            "  ",
            "",
        )
    if r.trace is not None:
        opened = f"open it with: {r.trace.command}" if r.trace.ok else f"not taken ({r.trace.message})"
        _wrapped(console, f"profiler trace of steps {r.trace.first_step}-{r.trace.last_step}: {opened}", "  ", "")
        for d in r.trace.devices[:8]:
            slowed = (
                f"; computation beside them {d.slowed_beside_collectives_ms:.1f} ms slower"
                if d.slowed_beside_collectives_ms >= 0.05
                else ""
            )
            _wrapped(
                console,
                f"{devices.device_name(d.device)}: kernels {d.busy_ms:.1f} ms a step of a "
                f"{d.span_ms:.1f} ms span; collectives {d.collectives_ms:.1f} ms, "
                f"{d.collectives_alone_ms:.1f} ms of them with nothing else running{slowed}",
                "    ",
                "      ",
            )
        if r.trace.kernels_note:
            _wrapped(console, r.trace.kernels_note, "    ", "      ")


def print_watch_record(console: Console, r: WatchRecord) -> None:
    """`results show` of a watched script: what `watch` printed, then where and how it ran."""
    print_watch(console, r)
    env = r.env
    for key, value in (
        ("id", r.id),
        ("created", r.created_utc),
        ("command", " ".join(r.command)),
        ("directory", r.cwd or fmt.DASH),
        ("exit code", fmt.DASH if r.exit_code is None else r.exit_code),
        ("host", f"{env.hostname or fmt.DASH}, {env.cpu_model or fmt.DASH} x {env.cpu_count or fmt.DASH}"),
        ("driver / CUDA (driver)", f"{env.driver_version or fmt.DASH} / {env.cuda_driver_version or fmt.DASH}"),
        (
            "keras",
            ", ".join(sorted({f"{f.keras_version} ({f.backend})" for f in r.fits if f.keras_version})) or fmt.DASH,
        ),
        ("gpuscout / methodology", f"{r.gpuscout_version} / {r.methodology_version}"),
        ("watched with", env.command_line or fmt.DASH),
    ):
        _wrapped(console, f"{key}: {value}", "    ", "")


def row(r: WatchRecord) -> list[str]:
    """A watched script in `results list`: id, created, workload, config, batch, device, status, throughput."""
    main = r.main
    config = f"watch {main.backend} {main.precision_policy}" if main and main.backend else f"watch ({r.mode})"
    # the headline: the user's clock where it has whole epochs, else the steps' own, named so
    rate = (
        f"{fmt.number(r.samples_per_s)} samples/s" + ("" if r.by_epochs else " (steps)")
        if r.samples_per_s
        else fmt.DASH
    )
    return [r.id, r.created_utc, r.workload, config, str(r.batch_size or fmt.DASH), r.gpu_label, r.status, rate]
