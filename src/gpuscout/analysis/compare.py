"""Comparing stored runs: ratios against a baseline with their uncertainty, and whether a
difference is there at all (pytest-benchmark's compare and hyperfine's honesty as models).

Runs are compared only with runs that differ in the one field asked about (`by`): same
workload, and the same backend, precision, XLA, batch, sequence length, data mode and device
otherwise. Each group's windows are pooled. The ratio of medians gets a bootstrap 95% interval
(windows resampled within each group). A difference is called when a two-sided test on the
windows gives p < 0.05, and the test is one that could give p < 0.05 at these window counts:
Mann-Whitney U (exact without ties) where its smallest possible p, 2 / C(n1 + n2, n1), is below
0.05 (4 + 4 windows and more), else Welch's t-test on the log of the windows (the ratio's
scale; hyperfine compares with Welch's t-test too), which decides from 2 + 2 windows. With fewer
than 2 windows in a group no test can tell, and the verdict says so instead of "no significant
difference". Runs of different methodology versions are
never pooled or compared; other differences in their environments (driver, framework versions,
GPU when not compared by GPU) are named in notes.

Watched scripts (`gpuscout watch`) are compared with runs of the same script only, by run or by
GPU, whatever else changed between them (that is the point: before and after a fix); what did
change (the command, batch, precision, input) is named in the notes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from gpuscout.analysis import communication
from gpuscout.core.errors import UsageError
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord

ALPHA = 0.05
MIN_WINDOWS = 2  # per group: below it no variance, so no test
TOO_FEW = f"too few windows to tell (need {MIN_WINDOWS} per group)"
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


FIELDS: dict[str, Callable[[RunRecord], object]] = {
    "gpu": lambda r: r.gpu_label,
    "backend": lambda r: r.backend.value,
    "precision": lambda r: r.precision.value,
    "xla": lambda r: "xla" if r.xla else "no-xla",
    "batch_size": lambda r: r.batch_size,
    "seq_len": lambda r: r.seq_len,
    "data": lambda r: r.data.value,
    "device": lambda r: r.device,
    "devices": lambda r: r.devices,
    # per-GPU or global batch-norm statistics over several devices: different training, never pooled
    "batchnorm": lambda r: r.batchnorm,
    # when the gradient all-reduce ran against the backward pass (XLA's scheduling flags, NCCL's
    # algorithm): a setting that changes the step time alone, so never pooled either
    "communication": communication.of,
    "mode": lambda r: r.mode,  # training and inference are never one group
    "format": lambda r: f"{r.inference.format}:{r.inference.variant}" if r.inference else "training",
}
# What a field compared brings with it: not held (None), or held in a narrower form. A GPU's device
# label follows the GPU. A batch-norm mode is a step of its own (gpuscout's per-replica step makes
# gradient buckets, Keras' DataParallel none), so by batchnorm only the communication settings,
# XLA's flags and NCCL's, must agree.
FOLLOWING: dict[str, dict[str, Callable[[RunRecord], object] | None]] = {
    "gpu": {"device": None},
    "batchnorm": {"communication": lambda r: communication.of(r, step_buckets=False)},
}
# What else can differ between runs and is named, not used to split
# What a fix to a watched script may change, named when runs differ in it
WATCHED: dict[str, Callable] = {
    "command": lambda r: " ".join(r.command),
    "batch": lambda r: r.batch_size,
    "precision": lambda r: r.main.precision_policy if r.main else None,
    "backend": lambda r: r.main.backend if r.main else None,
    "input": lambda r: r.main.input_type if r.main else None,
    "steps_per_execution": lambda r: r.main.steps_per_execution if r.main else None,
}
ENVIRONMENT: dict[str, Callable[[RunRecord], object]] = {
    "gpu": lambda r: r.gpu_label,
    "driver": lambda r: r.env.driver_version,
    "framework": lambda r: r.env.framework.backend_version if r.env.framework else None,
    "keras": lambda r: r.env.framework.keras_version if r.env.framework else None,
    "gpuscout": lambda r: r.gpuscout_version,
}


@dataclass
class Group:
    label: str
    run_ids: list[str]
    windows: list[float]  # pooled window throughputs
    median: float
    ci95_low: float | None
    ci95_high: float | None
    ratio: float | None = None  # median / baseline median
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    test: str | None = None  # mann-whitney | welch-t | too few windows
    verdict: str = "baseline"  # baseline | faster | slower | no significant difference


@dataclass
class Comparison:
    workload: str
    unit: str
    by: str
    held: dict  # the fields every group shares
    methodology_version: int
    groups: list[Group]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**asdict(self), "groups": [asdict(g) for g in self.groups]}


def window_values(r: StoredRecord) -> list[float]:
    if r.kind == "watch":  # samples/s per window: for one batch size, the step times' order reversed
        return r.window_samples_per_s() or [r.throughput.median]
    return [w.throughput for w in r.windows] or [r.throughput.median]


def _group(label: str, runs: list[StoredRecord]) -> Group:
    windows = [t for r in runs for t in window_values(r)]
    if len(runs) == 1:
        t = runs[0].throughput
        return Group(label, [runs[0].id], windows, t.median, t.ci95_low, t.ci95_high)
    low, high = _bootstrap_median_ci(np.asarray(windows))
    return Group(label, [r.id for r in runs], windows, statistics.median(windows), low, high)


def _bootstrap_median_ci(x: np.ndarray) -> tuple[float | None, float | None]:
    if len(x) < 2:
        return None, None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    medians = np.median(rng.choice(x, size=(BOOTSTRAP_RESAMPLES, len(x))), axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def ratio_ci(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% bootstrap interval of median(a) / median(b)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    xa, xb = np.asarray(a), np.asarray(b)
    ma = np.median(rng.choice(xa, size=(BOOTSTRAP_RESAMPLES, len(xa))), axis=1)
    mb = np.median(rng.choice(xb, size=(BOOTSTRAP_RESAMPLES, len(xb))), axis=1)
    ratios = ma / mb
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def smallest_mann_whitney_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact Mann-Whitney test can give for these sizes: the two
    most extreme of the C(n1 + n2, n1) equally likely orderings (3 + 3 windows: 0.1)."""
    return 2 / math.comb(n1 + n2, n1)


def welch_log(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t-test on log(a) and log(b), two or more values each: (mean_a - mean_b, its
    standard error sqrt(va/na + vb/nb), Welch-Satterthwaite degrees of freedom; 1 where se is 0)."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1)) if se > 0 else 1.0
    return float(la.mean() - lb.mean()), se, df


def welch_log_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of Welch's t-test on log(a) and log(b) (welch_log)."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    diff, se, df = welch_log(a, b)
    if se == 0:  # every window alike on both sides: equal, or as different as can be
        return 1.0 if diff == 0 else 0.0
    return float(2 * student_t.sf(abs(diff / se), df))


def significance(candidate: Group, baseline: Group) -> tuple[bool, float | None, str]:
    """(different?, p-value or None, the test used): a test that can decide at these window counts."""
    a, b = candidate.windows, baseline.windows
    if len(a) < MIN_WINDOWS or len(b) < MIN_WINDOWS:
        return False, None, "too few windows"
    if smallest_mann_whitney_p(len(a), len(b)) < ALPHA:
        from scipy.stats import mannwhitneyu  # lazily: see analysis/stats.py

        exact = len(set(a) | set(b)) == len(a) + len(b) and max(len(a), len(b)) <= 50
        p = float(mannwhitneyu(a, b, alternative="two-sided", method="exact" if exact else "asymptotic").pvalue)
        return p < ALPHA, p, "mann-whitney"
    p = welch_log_p(a, b)
    return p < ALPHA, p, "welch-t"


@dataclass
class Contrast:
    """One run's windows against a baseline's: what `tune -- COMMAND` reports for each change."""

    ratio: float  # median / baseline median
    ratio_low: float | None  # 95% bootstrap interval of the ratio
    ratio_high: float | None
    p_value: float | None
    test: str
    verdict: str  # faster | slower | no significant difference | too few windows to tell


def contrast(windows: list[float], baseline: list[float]) -> Contrast:
    """The ratio of medians with its interval, and the same significance test as `compare`."""
    ratio = statistics.median(windows) / statistics.median(baseline)
    low, high = ratio_ci(windows, baseline) if len(windows) > 1 and len(baseline) > 1 else (None, None)
    different, p, test = significance(
        Group("change", [], windows, 0.0, None, None), Group("baseline", [], baseline, 0.0, None, None)
    )
    verdict = (
        TOO_FEW if p is None else ("faster" if ratio > 1 else "slower") if different else "no significant difference"
    )
    return Contrast(ratio, low, high, p, test, verdict)


def compare(
    records: list[StoredRecord], by: str, baseline: str | None = None, sides: dict[str, str] | None = None
) -> list[Comparison]:
    """`sides`: by "side", each run's side (the export file it came from: `compare BASE.json NEW.json`)."""
    if by not in FIELDS and by not in ("run", "change", "side"):
        raise UsageError(f"unknown --by {by!r}: choose run, change, {', '.join(FIELDS)}")
    if by == "side" and not sides:
        raise UsageError("--by side compares two export files: gpuscout compare BASE.json NEW.json")
    # A watched script stopped by a limit, Ctrl-C or a crash measured its windows until then
    usable = [r for r in records if r.throughput and (r.ok or r.kind == "watch")]
    if not usable:
        raise UsageError("none of the selected runs finished with a throughput (status ok) to compare")
    held = {**FIELDS, **FOLLOWING.get(by, {})}
    held_fields = [f for f in FIELDS if f != by and held[f] is not None]
    sets: dict[tuple, list[StoredRecord]] = {}
    helds: dict[tuple, dict] = {}
    for r in usable:
        if r.kind == "watch":
            # A watched script is compared with itself, before and after a change (any change: the
            # batch, the precision, the pipeline), by run or by GPU, in samples/s per window.
            if by not in ("run", "gpu", "change", "side"):
                continue
            # by change: the runs of one `tune -- COMMAND` session, each change against its baseline
            key = (r.workload, r.methodology_version, "watch", *((r.group_id,) if by == "change" else ()))
            helds[key] = {"kind": "watched script", **({"tune session": r.group_id} if by == "change" else {})}
        elif by == "change":
            continue
        else:
            key = (r.workload, r.methodology_version, *(held[f](r) for f in held_fields))
            helds[key] = dict(zip(held_fields, key[2:]))
        sets.setdefault(key, []).append(r)
    versions = {r.methodology_version for r in usable}
    comparisons = []
    for key, runs in sets.items():
        label_of = {
            "run": lambda r: r.id,
            "change": lambda r: r.tune_change or "baseline",
            "side": lambda r: sides[r.id],
        }.get(by, lambda r: str(FIELDS[by](r)))
        by_label: dict[str, list[StoredRecord]] = {}
        for r in sorted(runs, key=lambda r: r.created_utc):
            by_label.setdefault(label_of(r), []).append(r)
        if len(by_label) < 2:
            continue
        labels = sorted(by_label, key=_natural) if by not in ("run", "side") else list(by_label)
        first = baseline if baseline is not None else ("baseline" if by == "change" else None)
        if first is not None:
            if first not in by_label:
                continue
            labels.remove(first)
            labels.insert(0, first)
        groups = [_group(label, by_label[label]) for label in labels]
        base = groups[0]
        for g in groups[1:]:
            g.ratio = g.median / base.median
            g.ratio_low, g.ratio_high = ratio_ci(g.windows, base.windows)
            different, g.p_value, g.test = significance(g, base)
            if g.test == "too few windows":
                g.verdict = TOO_FEW
            else:
                g.verdict = ("faster" if g.ratio > 1 else "slower") if different else "no significant difference"
        comparison = Comparison(
            workload=key[0], unit=runs[0].unit, by=by, methodology_version=key[1], held=helds[key], groups=groups
        )
        named = {**ENVIRONMENT, **WATCHED} if len(key) > 2 and key[2] == "watch" else ENVIRONMENT
        for name, get in named.items():
            if name == by or (by == "gpu" and name == "driver"):
                continue
            seen = sorted({str(get(r)) for r in runs})
            if len(seen) > 1:
                comparison.notes.append(f"runs differ in {name}: {', '.join(seen)}")
        comparisons.append(comparison)
    if baseline is not None and not comparisons:
        raise UsageError(f"no comparison has a {by} {baseline!r} to use as the baseline")
    if len(versions) > 1 and comparisons:
        comparisons[0].notes.append(
            f"methodology versions {sorted(versions)} are compared only within their own version"
        )
    return comparisons


def _natural(text: str):
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)
