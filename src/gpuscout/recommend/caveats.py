"""When `recommend`'s ranking does not mean what it seems to: said before it (issue 62, item 2).

A ranking of GPUs by speed and cost reads as "a faster GPU trains this faster". Four cases break
that, and each is said in one sentence with what to do:

- the run was measured on no GPU: it cannot judge a GPU, and says so first (cannot_judge), its
  figures at the two digits a prediction of +-50% has;
- the input and the host cap the training: every GPU reaches the cap, so the cheapest will do;
- the prediction borrows another kind of model's efficiency (a transformer's MFU for a user's
  model), the more so for a dense network, whose weights are used once per sample;
- the job is too small to load a GPU: launches, not arithmetic, set the step's pace.
"""

from __future__ import annotations

from gpuscout.catalog import predict
from gpuscout.core.units import about, counted
from gpuscout.recommend.jobs import STATE_BYTES_PER_PARAM, Job
from gpuscout.recommend.ranking import Row

# Every GPU that fits within this share of the input cap: the cap, not the GPU, sets the pace.
HOST_CAPPED_SHARE = 0.8
# Training FLOPs per parameter per sample (forward 2, backward 4) under which each weight is used
# about once per sample, as in a dense network; a transformer at 128 tokens does ~770 (6 x 128),
# ResNet-50 ~960 (3 x 8.2 GFLOP over 25.6M parameters)
DENSE_FLOPS_PER_PARAM = 20
# The job's GPU memory under this share of the smallest GPU's that fits it
SMALL_MEMORY_SHARE = 0.01


def caveats(job: Job, rows: list[Row]) -> list[str]:
    """One sentence per case that applies, the most consequential first."""
    fitting = [r for r in rows if r.fits and r.throughput is not None]
    if not fitting:
        return []
    out = []
    capped = _host_capped(job, fitting, rows)
    if capped:
        out.append(capped)
    borrowed = _borrowed(job, fitting)
    if borrowed:
        out.append(borrowed)
    small = _small(job, fitting)
    if small:
        out.append(small)
    return out


def rough(job: Job) -> bool:
    """Whether the job's figures rest on no GPU's measurement (a run measured on the CPU, or on a
    GPU the catalog does not know): predicted from FLOPs alone, to +-BAND_NO_REFERENCE."""
    return job.measured is not None and job.measured.gpu is None


def cannot_judge(job: Job) -> str | None:
    """Said before the answer (issue 75): a run measured on no known GPU cannot say how fast any
    GPU trains it, and every figure after this is a prediction from its FLOPs."""
    m = job.measured
    if m is None or m.gpu is not None:
        return None
    device = "the CPU" if m.device_label.lower() == "cpu" else f"a {m.device_label}, which the catalog does not know"
    return (
        f"Run {m.run_id} ran on {device}: it cannot say how fast a GPU trains this. Every GPU figure below "
        f"is predicted from the model's FLOPs and this host's input and loop time (+-{predict.BAND_NO_REFERENCE:.0%}), "
        "given to two digits; watch it on a GPU to measure it."
    )


def _host_capped(job: Job, fitting: list[Row], rows: list[Row]) -> str | None:
    """Where the input and host cap the training: the GPUs that reach HOST_CAPPED_SHARE of the cap
    (all of them: "any will do"; else how many, at least half) and the cheapest of them."""
    caps = [cap for r in fitting if (cap := getattr(r.throughput, "input_cap", None))]
    if not caps:
        return None
    cap = min(caps)
    near = [r for r in fitting if r.throughput.throughput >= HOST_CAPPED_SHARE * cap]
    if 2 * len(near) < len(fitting):
        return None
    priced = [r for r in near if r.eligible and r.hourly is not None]
    cheapest = min(priced, key=lambda r: r.usd_per_hour, default=None)
    take = (
        f" Take the cheapest{'' if len(near) == len(fitting) else ' of those'} "
        f"({cheapest.gpus}x {cheapest.gpu.short_name}, {cheapest.usd_per_hour:.2f} USD/h);"
        if cheapest
        else ""
    )
    said = f"about {about(cap)}" if rough(job) else f"{cap:,.0f}"
    which = (
        "Any of these GPUs will do: the input and host cap this training at "
        f"{said} {job.unit}/s, and every GPU reaches {HOST_CAPPED_SHARE:.0%} of that."
        if len(near) == len(fitting)
        else f"The input and host cap this training at {said} {job.unit}/s: {len(near)} of the "
        f"{counted(len(fitting), 'GPU')} reach {HOST_CAPPED_SHARE:.0%} of that, and a faster one buys little."
    )
    return f"{which}{take} fix the input first to use a faster one."


def _borrowed(job: Job, fitting: list[Row]) -> str | None:
    refs = {ref for r in fitting for ref in r.throughput.references if ref.endswith(predict.ASSUMED_SUFFIX)}
    if not refs:
        return None
    assumed = sorted(refs)[0].removeprefix("assumed: ")
    flops = job.training_flops_per_unit * job.units_per_sample
    params = job.fixed_bytes / STATE_BYTES_PER_PARAM
    per_param = flops / params if flops and params else None
    if per_param is not None and per_param < DENSE_FLOPS_PER_PARAM:
        return (
            f"Predicted at {assumed}, but this is a dense network ({per_param:.0f} training FLOPs per "
            "parameter a sample; a transformer of 128 tokens does ~770): memory traffic and launches set its "
            "pace, so the figures can be several times too high. Watch it on one GPU to measure it."
        )
    return (
        f"Predicted at {assumed}, another kind of model's efficiency "
        f"(+-{predict.BAND_NO_REFERENCE:.0%}): watch it on one GPU to measure it."
    )


def _small(job: Job, fitting: list[Row]) -> str | None:
    need = job.fixed_bytes + job.per_sample_bytes * job.batch_size
    smallest = min(r.gpu.memory_gb for r in fitting) * 1e9
    if not need or need >= SMALL_MEMORY_SHARE * smallest:
        return None
    return (
        f"A small job ({need / 1e6:,.1f} MB of GPU memory, under {SMALL_MEMORY_SHARE:.0%} of the smallest "
        "GPU's): too light to load any GPU, so a cheap one is about as fast as a dear one; a larger batch, "
        "or several trainings on one GPU, would use it."
    )
