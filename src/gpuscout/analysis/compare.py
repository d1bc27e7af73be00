"""Comparing stored runs: ratios against a baseline with their uncertainty, and whether a
difference is there at all (pytest-benchmark's compare and hyperfine's honesty as models).

Runs are compared only with runs that differ in the one field asked about (`by`): same
workload, and the same backend, precision, XLA, batch, sequence length, data mode and device
otherwise. The run is the unit of the test (analysis/between_runs.py): each run is one value
(a watched script's whole epochs where every run compared has them, else its windows' median),
a group of runs is their geometric mean, and a difference is judged against the spread between
runs, never with a run's windows as independent samples. One run a side cannot be judged, and
the verdict says so. Runs of different methodology versions are never pooled or compared; what
else differs between the runs compared (the model, batch, precision, backend, the machine, the
framework's versions) is named in notes.

Watched scripts (`gpuscout watch`) are compared with runs of the same script only, by run or by
GPU, whatever else changed between them (that is the point: before and after a fix); what did
change (the command, batch, precision, input) is named in the notes.

`contrast` and `significance` are tune's: one session's interleaved runs' windows against its
reference's (tune/judging.py), where the runs' agreement is judged on its own (finale.drift).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from gpuscout.analysis import between_runs, communication
from gpuscout.core.errors import UsageError
from gpuscout.record import StoredRecord
from gpuscout.record.run import RunRecord

ALPHA = 0.05
MIN_WINDOWS = 2  # per group: below it no variance, so no test
TOO_FEW = f"too few windows to tell (need {MIN_WINDOWS} per group)"
ONE_RUN_EACH = "cannot tell"
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
    "model (parameters)": lambda r: r.main.params if r.main else None,
}
ENVIRONMENT: dict[str, Callable[[RunRecord], object]] = {
    "gpu": lambda r: r.gpu_label,
    "host": lambda r: r.env.hostname,
    "CPU": lambda r: r.env.cpu_model,
    "driver": lambda r: r.env.driver_version,
    "framework": lambda r: r.env.framework.backend_version if r.env.framework else None,
    "keras": lambda r: r.env.framework.keras_version if r.env.framework else None,
    "gpuscout": lambda r: r.gpuscout_version,
}


@dataclass
class Group:
    label: str
    run_ids: list[str]
    runs: list[float]  # each run's value (Comparison.basis), in run_ids' order
    # The group's figure: its one run's value, or its runs' geometric mean; the interval a single
    # run's own (its epochs' or windows' bootstrap), or the t interval between the runs
    value: float
    ci95_low: float | None
    ci95_high: float | None
    ratio: float | None = None  # value / baseline value
    ratio_low: float | None = None  # None: one run a side, no interval between runs to draw
    ratio_high: float | None = None
    p_value: float | None = None
    test: str | None = None  # "welch-t on 3+3 runs", "prediction-t on 1+3 runs", "one run a side"
    verdict: str = "baseline"  # baseline | faster | slower | no significant difference | ONE_RUN_EACH


@dataclass
class Comparison:
    workload: str
    unit: str
    by: str
    held: dict  # the fields every group shares
    methodology_version: int
    groups: list[Group]
    basis: str = between_runs.BY_WINDOWS  # how each run was read: between_runs.BY_EPOCHS or BY_WINDOWS
    notes: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # runs left out: read as no throughput at all

    def to_dict(self) -> dict:
        return {**asdict(self), "groups": [asdict(g) for g in self.groups]}


def _group(label: str, runs: list[StoredRecord], how: str) -> Group:
    values = [between_runs.run_value(r, how) for r in runs]
    if len(runs) == 1:
        low, high = between_runs.run_interval(runs[0], how)
        return Group(label, [runs[0].id], values, values[0], low, high)
    low, high = between_runs.centre_interval(values)
    return Group(label, [r.id for r in runs], values, between_runs.centre(values), low, high)


def _judge(g: Group, base: Group) -> None:
    """The group against the baseline, run by run (analysis/between_runs.py)."""
    tested = between_runs.run_test(base.runs, g.runs)
    if tested is None:
        g.ratio, g.test, g.verdict = g.value / base.value, "one run a side", ONE_RUN_EACH
        return
    g.ratio, g.ratio_low, g.ratio_high = tested.ratio, tested.ratio_low, tested.ratio_high
    g.p_value, g.test = tested.p_value, tested.test
    different = tested.p_value < ALPHA
    g.verdict = ("faster" if g.ratio > 1 else "slower") if different else "no significant difference"


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
    se, df = between_runs.welch(float(la.var(ddof=1)), len(la), float(lb.var(ddof=1)), len(lb))
    return float(la.mean() - lb.mean()), se, df


def welch_log_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of Welch's t-test on log(a) and log(b) (welch_log)."""
    from scipy.stats import t as student_t  # lazily: see analysis/stats.py

    diff, se, df = welch_log(a, b)
    if se == 0:  # every window alike on both sides: equal, or as different as can be
        return 1.0 if diff == 0 else 0.0
    return float(2 * student_t.sf(abs(diff / se), df))


def significance(a: list[float], b: list[float]) -> tuple[bool, float | None, str]:
    """(different?, p-value or None, the test used) of windows `a` against `b`: a test that can
    decide at these window counts."""
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
    """The ratio of medians with its interval, and the same significance test as `compare`. Faster
    or slower only where the test and the interval agree: the rank test can reject at p 0.038 while
    the bootstrap interval of the medians' ratio holds 1.0, and tune printed "1.02x [0.99-1.05]
    faster" on an H100 (docs/benchmarks.md, 2026-12-05): a verdict its own interval contradicts."""
    ratio = statistics.median(windows) / statistics.median(baseline)
    low, high = ratio_ci(windows, baseline) if len(windows) > 1 and len(baseline) > 1 else (None, None)
    different, p, test = significance(windows, baseline)
    different = different and (low is None or high is None or not low <= 1.0 <= high)
    verdict = (
        TOO_FEW if p is None else ("faster" if ratio > 1 else "slower") if different else "no significant difference"
    )
    return Contrast(ratio, low, high, p, test, verdict)


def compare(
    records: list[StoredRecord], by: str, baseline: str | None = None, sides: dict[str, str] | None = None
) -> list[Comparison]:
    """`sides`: by "side", each run's side (the export file it came from: `compare BASE.json NEW.json`)."""
    if by not in FIELDS and by not in ("run", "change", "side", "command"):
        raise UsageError(f"unknown --by {by!r}: choose run, change, command, {', '.join(FIELDS)}")
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
            # by command: a watched script's runs as its command line ran them (before and after a
            # fix, each side run two or more times)
            if by not in ("run", "gpu", "change", "side", "command"):
                continue
            # by change: the runs of one `tune -- COMMAND` session, each change against its baseline
            key = (r.workload, r.methodology_version, "watch", *((r.group_id,) if by == "change" else ()))
            helds[key] = {"kind": "watched script", **({"tune session": r.group_id} if by == "change" else {})}
        elif by in ("change", "command"):
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
            "command": lambda r: " ".join(r.command),
        }.get(by, lambda r: str(FIELDS[by](r)))
        by_label: dict[str, list[StoredRecord]] = {}
        for r in sorted(runs, key=lambda r: r.created_utc):
            by_label.setdefault(label_of(r), []).append(r)
        if len(by_label) < 2:
            continue
        labels = sorted(by_label, key=_natural) if by not in ("run", "side", "command") else list(by_label)
        first = baseline if baseline is not None else ("baseline" if by == "change" else None)
        if first is not None:
            if first not in by_label:
                continue
            labels.remove(first)
            labels.insert(0, first)
        how = between_runs.basis(runs)
        # a run read as no throughput at all (0 samples/s windows) has no place on the ratio's log scale
        empty = sorted(r.id for r in runs if not _positive(between_runs.run_value(r, how)))
        if empty:
            by_label = {k: [r for r in v if r.id not in empty] for k, v in by_label.items()}
            by_label = {k: v for k, v in by_label.items() if v}
            labels = [label for label in labels if label in by_label]
            if len(labels) < 2 or (first is not None and labels[0] != first):
                continue
        groups = [_group(label, by_label[label], how) for label in labels]
        for g in groups[1:]:
            _judge(g, groups[0])
        comparison = Comparison(
            workload=key[0],
            unit=runs[0].unit,
            by=by,
            methodology_version=key[1],
            held=helds[key],
            groups=groups,
            basis=how,
        )
        if empty:
            comparison.empty = empty
            comparison.notes.append(f"left out, read as no throughput (0 {runs[0].unit}): run {', '.join(empty)}")
        if any(g.verdict == ONE_RUN_EACH for g in groups):
            comparison.notes.append(
                "one run a side: its ratio is one process against another, and unchanged runs of one script "
                "fell up to 21% apart on an H200 (docs/ci.md); measure each side 2 or more times to test it"
            )
        named = {**ENVIRONMENT, **WATCHED} if len(key) > 2 and key[2] == "watch" else ENVIRONMENT
        for name, get in named.items():
            if name == by or (by == "gpu" and name == "driver"):
                continue
            seen = sorted({_said(get(r)) for r in runs})
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


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _said(value: object) -> str:
    """A field's value in a note: counts with thousands separators (a model's 6,530 parameters)."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _natural(text: str):
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)
