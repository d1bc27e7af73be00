"""`gpuscout watch` on the terminal: the live view while the command runs, the verdict after it,
and watch records in `results list/show`.

The command's own output is the user's: in the live view each line it prints is shown above the
view as plain text (never read as markup); otherwise it passes through byte for byte.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from gpuscout.analysis import devices
from gpuscout.analysis.device_causes import NOT_CHECKED_ON_CPU
from gpuscout.measure.view import View
from gpuscout.record.watch import WatchRecord
from gpuscout.report import format as fmt
from gpuscout.report import terminal
from gpuscout.report.explain import print_explanations

if TYPE_CHECKING:
    from gpuscout.measure.command import Command
    from gpuscout.measure.gpus import GpuWatch

# The causes `gpuscout tune -- COMMAND` has a change for (tune/script.py)
TUNABLE = {"input_bound", "input_handover", "host_bound", "fp32_on_tensor_cores", "xla_off", "unused_memory"}
_STATUS_STYLE = {"ok": "green", "stopped": "green", "failed": "red", "interrupted": "yellow"}


class Lines:
    """Bytes of one stream cut into lines; a line rewritten with carriage returns (a progress
    bar) keeps only its last version."""

    def __init__(self, show) -> None:
        self.show, self.pending = show, b""

    def __call__(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            self.show(_last_version(line))

    def flush(self) -> None:
        if self.pending.strip():
            self.show(_last_version(self.pending))
        self.pending = b""


def _last_version(line: bytes) -> str:
    parts = [p for p in line.rstrip(b"\r").split(b"\r")]
    return parts[-1].decode("utf-8", errors="replace") if parts else ""


class Plain(View):
    """Not a terminal, or --quiet: the command's output as it is, and one line from gpuscout at the
    start (unless quiet). With --json the command's stdout goes to stderr: stdout is the JSON."""

    def __init__(self, quiet: bool, as_json: bool) -> None:
        self.quiet, self.as_json = quiet, as_json
        self.err = terminal.console(stderr=True, highlight=False, soft_wrap=True)

    def started(self, command: Command, pid: int, gpus: GpuWatch | None) -> None:
        if not self.quiet:
            self.err.print(
                Text(f"gpuscout watch: {command.workload} (pid {pid}) watched; the verdict comes at its end")
            )

    def stdout(self):
        return self.stderr if self.as_json else None

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.print(Text(f"note: {text}"))


class LiveView(View):
    """On a terminal: the command's output above, gpuscout's view of it below."""

    def __init__(self) -> None:
        self.err = terminal.console(stderr=True, highlight=False)
        self.live: Live | None = None
        self.out, self.errors = Lines(self._show), Lines(self._show)
        self.command, self.pid, self.gpus = None, None, None
        self.started_at = time.monotonic()
        self.fit: dict = {}
        self.window: dict | None = None
        self.epoch: dict | None = None
        self.state = "starting"

    def started(self, command: Command, pid: int, gpus: GpuWatch | None) -> None:
        self.command, self.pid, self.gpus, self.started_at = command, pid, gpus, time.monotonic()
        self.live = Live(
            get_renderable=self._render,
            console=self.err,
            refresh_per_second=2,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def _show(self, line: str) -> None:
        (self.live.console if self.live else self.err).print(Text(line), soft_wrap=True)

    def stdout(self):
        return self.out

    def stderr(self, chunk: bytes) -> None:
        self.errors(chunk)

    def note(self, text: str) -> None:
        self._show(f"gpuscout: {text}")

    def event(self, event: dict) -> None:
        kind = event["event"]
        if kind == "watch_fit":
            self.fit, self.state = event, "training"
        elif kind == "watch_window":
            self.window = event
        elif kind == "watch_epoch":
            self.epoch = event
        elif kind == "watch_limit":
            self.state = f"limit reached ({event['reason']}): stopping"
        elif kind == "watch_fit_end":
            self.state = "fit ended"

    def stopped(self) -> None:
        self.out.flush()
        self.errors.flush()
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _render(self) -> Group:
        elapsed = f"{time.monotonic() - self.started_at:.0f} s"
        lines = [
            f"gpuscout watch: {self.command.workload if self.command else ''} (pid {self.pid}) {elapsed}, {self.state}"
        ]
        if self.window:
            w = self.window
            seconds = w["end_monotonic_s"] - w["start_monotonic_s"]
            rate = f", {fmt.number(w['samples'] / seconds, 0)} samples/s" if w.get("samples") and seconds > 0 else ""
            wait = w.get("input_wait_s")
            waiting = f", input wait {wait / seconds:.0%}" if wait is not None and seconds > 0 else ""
            done, planned = (self.epoch["epoch"] if self.epoch else 0), self.fit.get("epochs")
            where = f"epoch {min(done + 1, planned) if planned else done + 1}{f'/{planned}' if planned else ''}"
            lines.append(f"{where}: step {fmt.seconds(seconds / max(w['steps'], 1))}{rate}{waiting}")
        for index, sample in (self.gpus.latest() if self.gpus else {}).items():
            util = "—" if sample.gpu_util_pct is None else f"{sample.gpu_util_pct:.0f}%"
            power = "" if sample.power_w is None else f", {sample.power_w:.0f} W"
            lines.append(f"GPU {index}: {util} busy, {fmt.bytes_(sample.memory_used_bytes)} used{power}")
        if self.epoch and self.epoch.get("logs"):
            logs = "  ".join(f"{k} {fmt.reading(v)}" for k, v in list(self.epoch["logs"].items())[:6])
            lines.append(f"epoch {self.epoch['epoch']}: {logs}")
        return Group(*(Text(line, no_wrap=True, overflow="ellipsis", style="cyan") for line in lines))


def view_for(quiet: bool, as_json: bool) -> View:
    """The live view on a terminal; plain output otherwise (a log file, a pipe, --quiet, --json)."""
    if not (quiet or as_json) and sys.stdout.isatty() and sys.stderr.isatty():
        return LiveView()
    return Plain(quiet, as_json)


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
        if r.samples_per_s:
            ci = (
                f" (95% CI {fmt.number(t.ci95_low, 0)}-{fmt.number(t.ci95_high, 0)})"
                if t and t.ci95_low is not None
                else ""
            )
            lines.append(f"throughput {fmt.number(r.samples_per_s, 0)} samples/s{ci}")
        if not main.custom:
            lines.append(
                f"input wait {fmt.percent(r.input_wait_share)}, outside the step "
                f"{fmt.percent(r.outside_step_share)}, compile {fmt.seconds(main.compile_s)}"
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
    return f"{main.input_type} ({main.input_workers} worker {kind})"


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
    rate = f"{fmt.number(r.samples_per_s)} samples/s" if r.samples_per_s else fmt.DASH
    return [r.id, r.created_utc, r.workload, config, str(r.batch_size or fmt.DASH), r.gpu_label, r.status, rate]
