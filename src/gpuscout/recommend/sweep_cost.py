"""`gpuscout recommend --from RUN --trials N`: what a sweep of N such trainings takes and costs on k
GPUs of each kind, against running them one after another where the run was measured.

Each trial is the run's whole training on one GPU. Trials share a GPU when their memory allows
(as `sweep`'s `trials_per_gpu` places them): m trials on one GPU take

    max(T1, m * g * T1)

where T1 is one trial alone and g the GPU-busy share of the trial on that GPU: its step's GPU
share times the part of T1 spent training (start-up and compilation are the host's). The GPU's
work of m trials is done one after another; each trial's input and host time runs beside the
others'. On k GPUs with m trials each, N trials take ceil(N / (k * m)) such rounds; the m that
finishes first is the one recommended. On jax the trials share one compilation cache (sweep's
`compilation_cache`), so the run's first-step compilation is paid once, not per trial: measured
on an H100, a transformer's trials compiled in 2.0-2.8 s after the first's 13.9 s. A GPU is paid
for the whole sweep, busy or not.

When the store holds a sweep of the same training (the run's own command line, the sweep's own
parameters set aside: the same script with other fixed arguments is another training), its
trials' mean time as its pruning left them (start-up and compilation included; a pruned trial
counts for the time it ran) replaces T1 on the GPU kind it ran on, scaled to the others by their
predicted training times, and its measured parallel efficiency (speed-up over the ideal for its
trials and slots) divides every wall time. Without one, each trial is the whole training, and
the basis says that no sweep's pruning is in it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from gpuscout import catalog as catalog_lib
from gpuscout.analysis import stats
from gpuscout.catalog import Catalog, GpuSpec
from gpuscout.core.units import counted
from gpuscout.core.units import seconds as fmt_seconds
from gpuscout.measure.command import workload_of
from gpuscout.recommend.jobs import Job
from gpuscout.recommend.ranking import FIT_SHARE, GPU_COUNTS, Row
from gpuscout.record.trial import StoredTrial

# Trials on one GPU at most: sweep's own bound on trials_per_gpu is 64, but past a few the host's
# cores decide (each trial is a Python process with its own input pipeline), and those of a GPU
# machine nobody measured are unknown.
MAX_TRIALS_PER_GPU = 4
# Trials share a GPU only where that shortens the sweep by at least this share: the model above
# interleaves their GPU work perfectly, which contention for memory and caches never quite allows.
SHARE_MIN_GAIN = 0.10


@dataclass(frozen=True)
class MeasuredSweep:
    """A sweep of the same training found in the store."""

    name: str
    trials: int  # trials of the training that ran: finished, or stopped early by its pruning
    slots: int
    trial_s: float  # their mean, start-up and compilation included: a trial as the sweep's pruning left it
    efficiency: float  # measured speed-up / the ideal one for `trials` on `slots`
    gpu: GpuSpec | None
    pruned: int = 0  # of `trials`, stopped early
    finished_s: float | None = None  # a finished trial's median

    @property
    def label(self) -> str:
        where = f" on the {self.gpu.name}" if self.gpu else ""
        each = (
            f"{self.pruned} of them pruned: a trial {fmt_seconds(self.trial_s)} on average, a finished one "
            f"{fmt_seconds(self.finished_s)}"
            if self.pruned and self.finished_s
            else f"none pruned, {fmt_seconds(self.trial_s)} each (mean)"
        )
        return (
            f"measured by sweep {self.name}: {counted(self.trials, 'trial')}{where}, {each}; "
            f"{self.efficiency:.0%} parallel efficiency on {self.slots} slot{'s' if self.slots > 1 else ''}"
        )


@dataclass(frozen=True)
class SweepOption:
    gpu: GpuSpec
    gpus: int
    trials_per_gpu: int
    trial_h: float  # one trial, sharing its GPU with trials_per_gpu - 1 others
    wall_h: float
    usd_per_hour: float | None  # all `gpus` together
    cost_usd: float | None

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu.id,
            "name": self.gpu.name,
            "gpus": self.gpus,
            "trials_per_gpu": self.trials_per_gpu,
            "trial_h": self.trial_h,
            "wall_h": self.wall_h,
            "usd_per_hour": self.usd_per_hour,
            "cost_usd": self.cost_usd,
        }


@dataclass
class SweepEstimate:
    trials: int
    here_h: float | None  # one after another on the device the run was measured on
    here: str  # that device, in words
    basis: str
    options: list[SweepOption] = field(default_factory=list)

    def fastest(self) -> SweepOption | None:
        return min(self.options, key=lambda o: (o.wall_h, o.cost_usd or math.inf), default=None)

    def cheapest(self) -> SweepOption | None:
        priced = [o for o in self.options if o.cost_usd is not None]
        return min(priced, key=lambda o: (o.cost_usd, o.wall_h), default=None)

    def to_dict(self) -> dict:
        best = self.fastest(), self.cheapest()
        return {
            "trials": self.trials,
            "here_h": self.here_h,
            "here": self.here,
            "basis": self.basis,
            "fastest": best[0].to_dict() if best[0] else None,
            "cheapest": best[1].to_dict() if best[1] else None,
            "options": [o.to_dict() for o in self.options],
        }


def rounds_wall_h(
    trials: int, gpus: int, per_gpu: int, trial_h: float, gpu_share: float, efficiency: float = 1.0
) -> tuple[float, float]:
    """(wall hours of the sweep, hours of one trial) with `per_gpu` trials sharing each GPU."""
    shared_h = trial_h * max(1.0, per_gpu * gpu_share)
    return math.ceil(trials / (gpus * per_gpu)) * shared_h / efficiency, shared_h


def trial_gpu_share(step_gpu_share: float, trial_h: float, startup_s: float) -> float:
    """The share of a whole trial its GPU is busy: the step's share over the part spent training."""
    return step_gpu_share * max(0.0, 1 - startup_s / 3600 / trial_h) if trial_h > 0 else step_gpu_share


def placement(
    trials: int, gpus: int, per_gpu_most: int, trial_h: float, gpu_share: float, efficiency: float = 1.0
) -> tuple[tuple[float, float], int]:
    """((wall hours, one trial's hours), trials per GPU): one per GPU unless sharing saves at least
    SHARE_MIN_GAIN of the wall time."""
    alone = rounds_wall_h(trials, gpus, 1, trial_h, gpu_share, efficiency)
    best = min(
        ((rounds_wall_h(trials, gpus, p, trial_h, gpu_share, efficiency), p) for p in range(1, per_gpu_most + 1)),
        key=lambda o: (o[0][0], o[1]),
    )
    return best if best[0][0] <= alone[0] * (1 - SHARE_MIN_GAIN) else (alone, 1)


def estimate(
    job: Job,
    rows: list[Row],
    trials: int,
    epochs: float,
    max_gpus: int,
    measured: MeasuredSweep | None = None,
    unlike: str | None = None,
) -> SweepEstimate:
    """`unlike`: why the store's sweeps of the script were not used (another training), if any."""
    m = job.measured
    assert m is not None
    counts = sorted({k for k in GPU_COUNTS if k <= max_gpus} | ({max_gpus} if max_gpus > GPU_COUNTS[-1] else set()))
    one_trial_bytes = job.fixed_bytes + job.per_sample_bytes * job.batch_size
    here_trial_h = _here_trial_h(job, epochs)
    # paid once by the sweep, not by each trial: the compilation its cache keeps (jax)
    once_h = compiled_once_h(m) if measured is None else 0.0
    basis = (
        "predicted: each trial the run's whole training, none stopped early (no sweep of this training is "
        f"stored, so no pruning is counted{'; ' + unlike if unlike else ''})"
        if measured is None
        else measured.label
    )
    if once_h >= 0.5 / 3600:  # under half a second it is not worth a word ("its 0 s compilation")
        basis += f", its {fmt_seconds(m.compile_s)} compilation once (the trials share jax's compilation cache)"
    anchor = None  # the predicted trial where the sweep ran, to scale its measured trial time by
    if measured is not None and measured.gpu is not None:
        anchor = next((r.one_gpu_hours for r in rows if r.gpu.id == measured.gpu.id and r.one_gpu_hours), None)
    elif measured is not None and m.gpu is None:  # swept on the CPU the run was watched on
        anchor = here_trial_h
    if measured is not None:
        here_trial_h = measured.trial_s / 3600
    out = SweepEstimate(
        trials,
        None if here_trial_h is None else once_h + trials * (here_trial_h - once_h),
        measured.gpu.name if measured is not None and measured.gpu else (m.gpu.name if m.gpu else m.device_label),
        basis,
    )
    for row in rows:
        if not row.fits or row.one_gpu_hours is None or row.gpu_share is None:
            continue
        trial_h = row.one_gpu_hours
        efficiency = 1.0
        if measured is not None:
            efficiency = measured.efficiency
            if anchor:  # else the sweep ran on a device nothing relates to: the predicted trial stays
                trial_h = measured.trial_s / 3600 * row.one_gpu_hours / anchor
        fit = int(FIT_SHARE * row.gpu.memory_bytes // one_trial_bytes) if one_trial_bytes > 0 else 1
        per_gpu_most = max(1, min(MAX_TRIALS_PER_GPU, fit))
        price = row.hourly.usd_per_hour if row.hourly else None
        trial_h, busy = _alone(m, row, trial_h, once_h)
        for k in counts:
            (wall_h, shared_h), per_gpu = placement(trials, k, per_gpu_most, trial_h, busy, efficiency)
            wall_h += once_h
            out.options.append(
                SweepOption(
                    row.gpu,
                    k,
                    per_gpu,
                    shared_h,
                    wall_h,
                    None if price is None else price * k,
                    None if price is None else price * k * wall_h,
                )
            )
    return out


def compiled_once_h(m) -> float:
    """Hours of the run's first-step compilation a sweep pays once, not per trial: on jax its
    trials share one compilation cache."""
    return m.compile_s / 3600 if m.backend == "jax" else 0.0


def _alone(m, row: Row, trial_h: float, once_h: float) -> tuple[float, float]:
    """(hours of one trial in the sweep, the share of it its GPU is busy): the compilation paid
    once by the sweep is not the trial's."""
    trial_h -= once_h
    return trial_h, trial_gpu_share(row.gpu_share, trial_h, m.startup_s - m.compile_s if once_h else m.startup_s)


def predicted_wall_h(job: Job, row: Row, trials: int, gpus: int, per_gpu: int) -> float:
    """A sweep of `trials` on `gpus` GPUs of `row`'s kind with `per_gpu` trials sharing each, as
    estimate() predicts it from the run alone (benchmarks/recommend_from_run.py checks it)."""
    m = job.measured
    once_h = compiled_once_h(m)
    trial_h, busy = _alone(m, row, row.one_gpu_hours, once_h)
    return once_h + rounds_wall_h(trials, gpus, per_gpu, trial_h, busy)[0]


def _here_trial_h(job: Job, epochs: float) -> float | None:
    m = job.measured
    if not m.samples_per_s or not job.dataset_units:
        return None
    seconds = (
        job.dataset_units * epochs / (m.samples_per_s * job.units_per_sample)
        + epochs * (m.epoch_overhead_s + m.epoch_host_s)
        + m.startup_s
    )
    return seconds / 3600


def find_measured(
    command: list[str] | None, sweeps: dict[str, list[StoredTrial]], catalog: Catalog
) -> MeasuredSweep | None:
    """The store's sweep with the most trials that ran `command`'s training (same_training), its
    pruned trials counted for the time they ran."""
    if not command:
        return None
    best: MeasuredSweep | None = None
    for name, rows in sweeps.items():
        ran = [
            (t.status, t.result)
            for t in rows
            if t.status in ("ok", "pruned")
            and t.result
            and t.result.command
            and t.result.duration_s
            and same_training(command, t.result.command, t.params)
        ]
        if not ran or (best is not None and len(ran) <= best.trials):
            continue
        done = [r for _, r in ran if r is not None]
        durations = [r.duration_s for r in done]
        finished = [r.duration_s for status, r in ran if status == "ok" and r is not None]
        slots = len({r.slot for r in done})
        spans = sorted((r.started_monotonic_s, r.ended_monotonic_s) for r in done)
        busy = stats.covered_s(spans)
        speedup = sum(durations) / busy if busy > 0 else 1.0
        ideal = len(done) / math.ceil(len(done) / slots)
        names = [r.telemetry.gpu_name for r in done if r.telemetry]
        named = [n for n in names if n]
        gpu = catalog_lib.match(statistics.mode(named), catalog) if named else None
        best = MeasuredSweep(
            name,
            len(done),
            slots,
            statistics.fmean(durations),
            min(1.0, speedup / ideal),
            gpu,
            pruned=len(done) - len(finished),
            finished_s=statistics.median(finished) if finished else None,
        )
    return best


def unlike(command: list[str] | None, sweeps: dict[str, list[StoredTrial]]) -> str | None:
    """Where the store's sweeps ran the run's script but another training (its other fixed
    arguments): which, and how the first differs, so that "no sweep" is not read as "none seen"."""
    if not command:
        return None
    script = workload_of(command)
    for name, rows in sweeps.items():
        for t in rows:
            argv = t.result.command if t.result else None
            if argv and workload_of(argv) == script and not same_training(command, argv, t.params):
                theirs = " ".join(_fixed(argv, t.params)[0])
                return f"sweep {name} ran {script} as `{theirs}`: another training, not counted"
    return None


def same_training(command: list[str], trial_argv: list[str], params: dict) -> bool:
    """Whether a sweep trial's argv trains what `command` trains: the same script with the same
    arguments, once the sweep's own parameters (the values it filled in, and their flags) are set
    aside on both (`python train.py --lr 0.01 --epochs 5` and a trial `train.py --lr 0.3 --epochs 5`
    of a sweep over lr: the same; `--epochs 2`: another training)."""
    if workload_of(command) != workload_of(trial_argv):
        return False
    fixed, flags = _fixed(trial_argv, params)
    return _after_script(_without(command, flags)) == _after_script(fixed)


def _fixed(argv: list[str], params: dict) -> tuple[list[str], set[str]]:
    """(the argv without the values a sweep filled in and their flags, those flags)."""
    values = {str(v) for v in params.values()} | {f"{v:g}" for v in params.values() if isinstance(v, float)}
    keep: list[str] = []
    flags: set[str] = set()
    for word in argv:
        flag, eq, value = word.partition("=")
        if eq and flag.startswith("-") and value in values:
            flags.add(flag)
        elif word in values:
            if keep and keep[-1].startswith("-"):
                flags.add(keep.pop())
        else:
            keep.append(word)
    return keep, flags


def _without(argv: list[str], flags: set[str]) -> list[str]:
    """`argv` without `flags` and the value after each (or `flag=value`)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in flags:
            skip = True
        elif word.partition("=")[0] not in flags:
            out.append(word)
    return out


def _after_script(argv: list[str]) -> list[str]:
    """The arguments after the script (the interpreter's path differs between a run and a trial)."""
    for index, word in enumerate(argv):
        if word.endswith(".py") or (index and argv[index - 1] == "-m"):
            return argv[index + 1 :]
    return argv[1:]
