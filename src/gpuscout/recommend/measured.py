"""`gpuscout recommend --from RUN`: the job a stored run did, and its speed on other GPUs predicted
from where that run's step time went.

A step's time is split three ways (shares of the steady windows' time):
- the GPU busy share g (NVML utilisation, never more than the time not spent waiting or between
  steps) scales with the GPU, by gpuscout.catalog.predict's ratio of the two GPUs (compute peak vs
  memory bandwidth by the model's arithmetic intensity);
- the input wait and the host's own time (dispatch, callbacks, the loop) do not: they are this
  host's, and a faster GPU leaves them as they are.
So with X the measured samples/s and S the GPU part's speed ratio, the prediction is

    X' = X / ((1 - g) + g / S),   at most X / (1 - g): the cap the input and the host set.

The shares that do not scale are the least portable part of the prediction (the same input-bound
script ran 20% faster on one lent machine than on another of the same GPU kind: their hosts
differ), so the band around a prediction widens with them by HOST_VARIATION.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.catalog import Catalog, GpuSpec, predict
from gpuscout.core.spec import Precision
from gpuscout.core.units import about

# Relative variation of the time a step spends off the GPU (input, host) between two hosts of the
# same GPU kind: an input-bound script ran 20% faster on one lent H200 machine than on another
# (issue 32, 2026-11-24). The band of a prediction widens by this on the shares that do not scale.
HOST_VARIATION = 0.20
# Below this GPU-busy share a faster GPU is mostly wasted: the advice points at the input or host
# first (`gpuscout tune -- COMMAND`).
FIX_FIRST_BELOW = 0.5


@dataclass(frozen=True)
class Split:
    """Where the measured step's time went: shares of the steady windows' time, summing to 1."""

    gpu_share: float  # the GPU busy: scales with the GPU
    input_share: float  # blocked on the next batch
    host_share: float  # the rest: the host's own work between and around the GPU's
    basis: str

    @property
    def fixed_share(self) -> float:
        """What a faster GPU leaves as it is."""
        return self.input_share + self.host_share


@dataclass(frozen=True)
class MeasuredRun:
    """What a stored run says about its own job, for predicting it elsewhere."""

    run_id: str
    record_kind: str  # watch | benchmark
    gpu: GpuSpec | None  # the catalog's entry of the GPU it ran on; None: a CPU or an unknown GPU
    device_label: str  # "NVIDIA H100 80GB HBM3", "cpu"
    devices: int  # GPUs the run used
    samples_per_s: float | None  # steady median; None: no step timing
    samples_per_s_low: float | None
    samples_per_s_high: float | None
    split: Split | None
    training_flops_per_sample: float | None
    command: list[str] | None = None  # a watched script's (a sweep of it is looked up by it)
    script: str | None = None
    # per epoch beyond its training steps, each on its own ceiling: its validation (the GPU's work,
    # made faster as the steps are) and the host's (the callbacks at its end, the time between
    # epochs: this host's, as they are). A record before validation was timed: all of it scaled
    epoch_overhead_s: float = 0.0
    epoch_host_s: float = 0.0
    # once per run, beyond its timed steps and epochs: start-up, imports, data loading, compilation,
    # and the script's own work after training (not scaled: mostly the host's)
    startup_s: float = 0.0
    tune_change: str | None = None  # a `tune -- COMMAND` variant: the change it ran with
    # its first step's compilation (part of startup_s); a sweep's trials on jax share one
    # compilation cache, so after the first they load what it compiled
    compile_s: float = 0.0
    backend: str | None = None
    # How the run ended when not as it should: the prediction stands on the steps it timed before
    # that, and says so (None: it ended ok, or was stopped at --steps/--duration as asked)
    ended: str | None = None
    # Data-parallel efficiency at `devices` (1.0 on one): what one GPU's share of a sample is, once
    # the all-reduce and the rest of the spreading are taken out; how it was found
    efficiency: float = 1.0
    efficiency_basis: str | None = None

    @property
    def label(self) -> str:
        variant = f" (tune's {self.tune_change} variant)" if self.tune_change else ""
        return f"run {self.run_id}{variant} on the {self.gpu.name if self.gpu else self.device_label}"

    def gpu_seconds_per_sample(
        self, target: GpuSpec, precision: Precision, intensity: float, catalog: Catalog, kind: str
    ) -> tuple[float, str] | None:
        """Seconds of one GPU of `target`'s kind per sample, and how that was found."""
        assert self.samples_per_s and self.split
        # GPU-seconds of one GPU per sample, as on one: N GPUs at efficiency e did it in 1/(N e) of that
        measured = self.split.gpu_share / self.samples_per_s * self.devices * self.efficiency
        if self.gpu is not None:
            if target.id == self.gpu.id:
                return measured, "measured"
            ratio = predict.scale(1.0, self.gpu, target, precision, predict.alpha(intensity))
            return (measured / ratio, f"{ratio:.2f}x the {self.gpu.name}'s GPU part") if ratio else None
        if not self.training_flops_per_sample:
            return None
        ref = predict.assumed_reference(kind, self.training_flops_per_sample, catalog, precision)
        scaled = predict.scale(ref.throughput, catalog.get(ref.gpu_id), target, precision, predict.alpha(intensity))
        return (1 / scaled, ref.label.removeprefix("assumed: ")) if scaled else None


@dataclass(frozen=True)
class RunPrediction:
    """Samples/s of `gpus` GPUs of one kind, from a measured run."""

    samples_per_s: float
    low: float
    high: float
    gpu_share: float  # of the predicted step: what the next faster GPU could still save
    input_cap: float | None  # samples/s with an infinitely fast GPU (the input and host alone)
    basis: str  # measured | predicted
    how: str


def predict_run(
    m: MeasuredRun,
    target: GpuSpec,
    precision: Precision,
    intensity: float,
    catalog: Catalog,
    kind: str,
    gpus: int = 1,
    efficiency: float = 1.0,
    band: float = predict.BAND_MEASURED_REFERENCE,
) -> RunPrediction | None:
    """The run's samples/s on `gpus` GPUs of `target`'s kind (data parallel at `efficiency`); None
    where it cannot be predicted (no step timing, no FLOP count for a CPU-measured run)."""
    if not m.samples_per_s or m.split is None:
        return None
    found = m.gpu_seconds_per_sample(target, precision, intensity, catalog, kind)
    if found is None:
        return None
    gpu_s, how = found
    fixed_s = m.split.fixed_share / m.samples_per_s
    gpu_s /= gpus * efficiency
    value = 1 / (fixed_s + gpu_s)
    cap = 1 / fixed_s if fixed_s > 0 else None
    same = m.gpu is not None and target.id == m.gpu.id and gpus == m.devices
    if same:  # the run's own windows' range, and another host's input and host time
        low = m.samples_per_s_low / (1 - m.split.fixed_share + m.split.fixed_share / (1 - HOST_VARIATION))
        high = m.samples_per_s_high / (1 - m.split.fixed_share + m.split.fixed_share / (1 + HOST_VARIATION))
        return RunPrediction(m.samples_per_s, low, high, m.split.gpu_share, cap, "measured", m.label)
    gpu_band = band if m.gpu is not None else predict.BAND_NO_REFERENCE
    low = 1 / (fixed_s / (1 - HOST_VARIATION) + gpu_s / (1 - gpu_band))
    high = 1 / (fixed_s / (1 + HOST_VARIATION) + gpu_s / (1 + gpu_band))
    return RunPrediction(value, low, high, gpu_s / (fixed_s + gpu_s), cap, "predicted", how)


def describe(m: MeasuredRun) -> str:
    """One line: what the prediction stands on."""
    if m.samples_per_s is None or m.split is None:
        return f"{m.label}: no step timing"
    s = m.split
    # without a GPU there is no GPU-busy share: the step's own compute, which a GPU would take over
    busy = "GPU-busy" if m.gpu is not None or m.device_label.lower() != "cpu" else "compute (no GPU ran it)"
    line = (
        f"from {m.label}: {s.gpu_share:.0%} of its step was {busy}, {s.input_share:.0%} waiting for input, "
        f"{s.host_share:.0%} on the host ({s.basis})"
    )
    if s.fixed_share > 0:
        cap = m.samples_per_s / s.fixed_share
        said = f"about {about(cap)}" if m.gpu is None else f"{cap:,.0f}"
        line += f"; input and host cap it at {said} samples/s on this host"
    if m.devices > 1 and m.efficiency_basis:
        line += f"; on {m.devices} devices: {m.efficiency_basis}"
    return line


def fix_first(m: MeasuredRun) -> str | None:
    """The bottleneck to fix before paying for a faster GPU, when the GPU was mostly idle."""
    if m.split is None or m.split.gpu_share >= FIX_FIRST_BELOW:
        return None
    s = m.split
    what = "waiting for input" if s.input_share >= s.host_share else "on the host (between and around the steps)"
    most = 1 / s.fixed_share if s.fixed_share else math.inf
    command = " ".join(m.command) if m.command else "python train.py"
    busy = (
        f"the GPU was busy {s.gpu_share:.0%}"
        if m.gpu is not None or m.device_label != "cpu"
        else (f"its compute was {s.gpu_share:.0%}")
    )
    gain = f"{most - 1:.0%}" if most < 2 else f"{most:.1f}x"
    return (
        f"{busy} of each step and {max(s.input_share, s.host_share):.0%} went {what}: "
        f"no GPU can make this training more than {gain} faster. Fix that first: "
        f"gpuscout tune -- {command}"
    )
