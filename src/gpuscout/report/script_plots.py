"""The report's figures of the user's own scripts: a watched script's timeline, what each change
of a tune session bought, a sweep's curves (matplotlib through report/plots.py, which sets it up
and renders a figure as SVG or PNG)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from gpuscout.record.trial import StoredTrial
from gpuscout.record.watch import WatchRecord
from gpuscout.report.plots import plt


def watch_timeline(record: WatchRecord) -> Figure | None:
    """A watched script over time: step time, the share of each window spent waiting for the next
    batch, and GPU utilisation (NVML), with the epochs' ends marked."""
    windows = record.windows
    samples = record.telemetry.samples if record.telemetry else []
    if not windows and not samples:
        return None
    t0 = min([w.start_monotonic_s for w in windows] + [s.t_monotonic_s for s in samples])
    panels = 3 if samples else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 2.2 * panels + 0.6), sharex=True)
    mids = [(w.start_monotonic_s + w.end_monotonic_s) / 2 - t0 for w in windows]
    axes[0].plot(mids, [w.step_time_s * 1000 for w in windows], marker=".", lw=1)
    axes[0].set_ylabel("step time (ms)", fontsize=8)
    axes[1].plot(
        mids,
        [100 * (w.input_wait_s or 0) / w.seconds if w.input_wait_s is not None else float("nan") for w in windows],
        marker=".",
        lw=1,
        label="waiting for the next batch",
    )
    axes[1].plot(
        mids,
        [100 * (w.outside_step_s or 0) / w.seconds if w.outside_step_s is not None else float("nan") for w in windows],
        marker=".",
        lw=1,
        label="between steps (callbacks, the loop)",
    )
    axes[1].set_ylabel("share of the time (%)", fontsize=8)
    axes[1].set_ylim(0, 100)
    axes[1].legend(fontsize=7)
    if samples:
        axes[2].plot(
            [s.t_monotonic_s - t0 for s in samples],
            [float("nan") if s.gpu_util_pct is None else s.gpu_util_pct for s in samples],
            lw=1,
        )
        axes[2].set_ylabel("GPU utilisation (%)", fontsize=8)
        axes[2].set_ylim(0, 105)
    epochs = [e for fit in record.fits for e in fit.epochs]
    for ax in axes:
        for e in epochs:
            ax.axvline(e.end_monotonic_s - t0, color="grey", lw=0.8, ls="--")
    axes[-1].set_xlabel("time since the first step (s); dashed: the end of each epoch's training steps")
    axes[0].set_title(f"{record.workload}, watched ({record.id}, {record.gpu_label})")
    return fig


def ratio_said(g) -> str:
    """A change's speed-up as a label says it: '1.23x [1.10-1.37]', or '0.76x' without an interval."""
    ci = f" [{g.ratio_low:.2f}–{g.ratio_high:.2f}]" if g.ratio_low is not None and g.ratio_high is not None else ""
    return f"{g.ratio:.2f}x{ci}"


def tune_speedups(comparison) -> Figure | None:
    """One `tune -- COMMAND` session: each change's speed-up over the baseline, a bar from 1.0 (the
    baseline) to its ratio on a linear axis, its 95% interval drawn, each named by its change and
    its figure. A log axis labelled "2x10^0" and "6x10^-1", its bars drawn from the left edge, made
    0.76x look like a gain (issue 78)."""
    groups = [g for g in comparison.groups[1:] if g.ratio is not None]
    if not groups:
        return None
    groups = sorted(groups, key=lambda g: g.ratio)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(groups)))
    ratios = [g.ratio for g in groups]
    low = [g.ratio - (g.ratio_low if g.ratio_low is not None else g.ratio) for g in groups]
    high = [(g.ratio_high if g.ratio_high is not None else g.ratio) - g.ratio for g in groups]
    colors = ["#55A868" if g.verdict == "faster" else "#C44E52" if g.verdict == "slower" else "#8C8C8C" for g in groups]
    labels = [f"{g.label} ({ratio_said(g)})" for g in groups]
    ax.barh(labels, [r - 1.0 for r in ratios], left=1.0, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(1.0, color="black", lw=0.8)
    ends = [r - lo for r, lo in zip(ratios, low)] + [r + hi for r, hi in zip(ratios, high)] + [1.0]
    reach = max(abs(e - 1.0) for e in ends) * 1.1 or 0.1
    ax.set_xlim(max(0.0, 1.0 - reach), 1.0 + reach)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.2g}x"))
    ax.set_xlabel(
        "speed-up over the baseline (1x), whiskers its 95% CI\n"
        "green: faster, red: slower, grey: no significant difference",
        fontsize=8,
    )
    ax.set_title(
        f"{comparison.workload}: what each change bought (tune session {comparison.held.get('tune session', '')})",
        fontsize=9,
    )
    return fig


def sweep_curves(name: str, trials: list[StoredTrial]) -> Figure | None:
    """One sweep: each trial's metric against the epoch; trials stopped early (pruned) dashed and
    marked where they stopped, the best trial in bold."""
    results = [t.result for t in trials if t.result]
    metric = next((r.metric for r in results if r.metric), None)
    if metric is None:
        return None
    curves = []
    for r in results:
        points = [
            (h.get("epoch", h.get("step", i)), h[metric.name])
            for i, h in enumerate(r.history, start=1)
            if metric.name in h
        ]
        if points:
            curves.append((r, points))
    if not curves:
        return None
    finals = [(r, pts[-1][1]) for r, pts in curves if r.status == "ok"]
    best = (max if metric.direction == "max" else min)(finals, key=lambda f: f[1])[0] if finals else None
    fig, ax = plt.subplots(figsize=(8, 4))
    for r, points in curves:
        xs, ys = zip(*points)
        if r.status == "pruned":
            ax.plot(xs, ys, ls="--", color="#8C8C8C", lw=0.9)
            ax.plot(xs[-1], ys[-1], "x", color="#C44E52")
        else:
            ax.plot(xs, ys, color="#4C72B0" if r is not best else "#55A868", lw=2.2 if r is best else 1.0)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric.name)
    pruned = sum(1 for r, _ in curves if r.status == "pruned")
    ax.set_title(
        f"sweep {name}: {metric.name} by epoch ({len(curves)} trials; {pruned} pruned: dashed, x where "
        "stopped; best in green)",
        fontsize=9,
    )
    return fig
