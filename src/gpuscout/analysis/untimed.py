"""The verdict on a watched script whose training steps were not timed (analysis/verdict.py asks):
it failed first, it called no fit, its fit's first step never ended, or only NVML saw it."""

from __future__ import annotations

import re

from gpuscout.record.watch import Cause, WatchedFit, WatchRecord

# Below this mean NVML utilisation a GPU counts as starved (a GPU-bound run sits near 100%)
STARVED_UTIL_PCT = 70.0


ANSI = re.compile(r"\x1b\[[0-9;]*m")
FAILURE_CHARS = 500  # of the error's message shown as the evidence
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?")


def failed(r: WatchRecord) -> Cause:
    """The script ended with an error before any training step was timed: that is the finding."""
    tail = [ANSI.sub("", line).strip() for line in (r.error.stderr_tail if r.error else "").splitlines()]
    tail = [line for line in tail if line]
    # the exception's own line ("TypeError: ..."), and the message's last line when it runs on (Keras
    # wraps a layer's error in lines of its own, the cause last)
    at = next((i for i in range(len(tail) - 1, -1, -1) if EXCEPTION_LINE.match(tail[i])), None)
    last = tail[-1] if tail else None
    if at is not None:  # the exception and the lines of its message after it, as one line
        last = " ".join(tail[at:])
        last = last if len(last) <= FAILURE_CHARS else last[:FAILURE_CHARS] + " …"
    known = r.error.explanations[0] if r.error and r.error.explanations else None
    return Cause(
        code="script_failed",
        saving_share=None,
        message=f"the script failed (exit code {r.exit_code}) before any training step was timed",
        evidence=f"its last error line: {last}" if last else "it printed nothing on stderr",
        fix=f"{known.title}: {known.fix}"
        if known
        else "fix the error above and run it again (`gpuscout doctor --explain LOG` reads a whole log)",
    )


def no_steps(r: WatchRecord) -> Cause:
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    seen = f"GPU utilisation {util:.0f}% over the run" if util is not None else "no GPU telemetry"
    if r.mode == "pid":
        return Cause(
            code="attached",
            saving_share=None,
            message="attached to a running process: NVML only, so what utilisation, memory and power "
            "show; no step timing, no input wait",
            evidence=seen,
            fix="for the full diagnosis run the training under gpuscout: gpuscout watch --steps 200 -- COMMAND",
        )
    waiting = next((f for f in r.fits if f.first_step_unfinished_s is not None), None)
    if waiting is not None:
        return unfinished_first_step(r, waiting, seen)
    return Cause(
        code="no_steps",
        saving_share=None,
        message="no training step was timed: the script called no Keras Model.fit"
        + ("" if r.instrumented else " (and no Python process of it was instrumented)"),
        evidence=seen,
        fix="step timing needs Model.fit, or one line in a loop of your own:",
        code_snippet="import gpuscout.watch\n...\ngpuscout.watch.step(samples=batch_size)   # after each step",
    )


def gpu_idle(r: WatchRecord) -> Cause | None:
    """Without step timing: the GPU idled, for a reason NVML alone cannot name."""
    util = r.telemetry.gpu_util_mean_pct if r.telemetry else None
    if util is None or util >= STARVED_UTIL_PCT:
        return None
    startup = (
        ""
        if r.startup_s is None
        else f", after a start-up of {r.startup_s:.0f} s before the GPU was first busy "
        "(imports, loading, compiling: not counted)"
    )
    return Cause(
        code="gpu_idle",
        saving_share=r.gpu_idle_share,
        message=f"the GPU ran kernels only {util:.0f}% of the time while training: the input pipeline or "
        "the host holds it back",
        evidence=f"NVML utilisation {util:.0f}% mean over {r.telemetry.window_sample_count} samples{startup}",
        fix="step timing tells which: watch the training with fit (or gpuscout.watch.step() in "
        "your loop) to see the input wait",
    )


def unfinished_first_step(r: WatchRecord, fit: WatchedFit, seen: str) -> Cause:
    """Fit began, and its first step (building, compiling, the first batch) had not ended when
    the run did: it was seen, and is not "no fit"."""
    batch = f" (batch {fit.batch_size})" if fit.batch_size else ""
    ended = {"interrupted": "was interrupted", "stopped": "was stopped", "failed": "failed"}.get(r.status, "ended")
    return Cause(
        code="first_step_unfinished",
        saving_share=None,
        message=f"Model.fit started{batch}, and no training step had finished when the run {ended} "
        f"{fit.first_step_unfinished_s:.0f} s later: the first step builds and compiles the "
        "train step (XLA) and waits for the first batch, which a large model, a large batch or a "
        "slow first batch can take minutes to do",
        evidence=seen,
        fix="give it longer (`gpuscout watch --duration 15m -- ...`, or no limit) or watch a smaller "
        "batch first; on jax a persistent compilation cache (JAX_COMPILATION_CACHE_DIR) makes "
        "the next start skip the compile",
    )
