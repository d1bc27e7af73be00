"""What each optimisation buys: one factor at a time against a baseline, then the best of each
together (the module docstring of gpuscout.tune says which run is held against which)."""

from __future__ import annotations

import math

from gpuscout.analysis.compare import ratio_ci
from gpuscout.core.spec import Backend, DataMode, Precision
from gpuscout.record.run import RunRecord
from gpuscout.tune.session import Session
from gpuscout.tune.workload_results import Ablation, AblationRow, BestSetting, LossChange, Speedup

LOSS_CHANGE_LIMIT = 0.10  # relative change of the fixed-step loss that counts as "changed training"


def throughput(record: RunRecord | None) -> float | None:
    return record.samples_per_s if record and record.ok else None


def speedup(record: RunRecord | None, baseline: RunRecord | None) -> Speedup | None:
    if not throughput(record) or not throughput(baseline):
        return None
    low, high = ratio_ci(record.window_rates(), baseline.window_rates())
    return Speedup(ratio=record.samples_per_s / baseline.samples_per_s, ci95_low=low, ci95_high=high)


def loss_change(record: RunRecord | None, baseline: RunRecord | None) -> LossChange | None:
    """The fixed-step loss against the baseline's, for runs fed the same data (other input modes
    see other samples, so their losses say nothing about the setting)."""
    if not record or not baseline or record.fixed_step_loss is None or baseline.fixed_step_loss is None:
        return None
    if record.data != baseline.data:
        return None
    new, old = record.fixed_step_loss, baseline.fixed_step_loss
    broken = not math.isfinite(new)
    relative = math.inf if broken else abs(new - old) / max(abs(old), 1e-6)
    return LossChange(
        baseline=old,
        value=new,
        steps=record.fixed_steps,
        relative=relative,
        changed=broken or relative > LOSS_CHANGE_LIMIT,
    )


def _row(
    label: str, record: RunRecord | None, reference: RunRecord | None, factor: str | None, versus: str
) -> AblationRow:
    return AblationRow(
        label=label,
        factor=factor,
        versus=versus,
        run_id=record.id if record else None,
        status=record.status if record else "skipped",
        precision=record.precision.value if record else None,
        xla=record.xla if record else None,
        data=record.data.value if record else None,
        samples_per_s=throughput(record),
        throughput=record.throughput.model_dump() if record and record.throughput else None,
        speedup=speedup(record, reference),
        loss=loss_change(record, reference),
        input_wait_share=record.input_wait_share if record else None,
        # the same variance flags as bench's: a row whose windows disagree says so
        flags=[f.code for f in record.flags] if record else [],
    )


def ablation(session: Session, precisions: list[Precision]) -> tuple[Ablation, dict[str, RunRecord | None]]:
    """Input settings and the combined run against the baseline (fp32, XLA off where possible,
    naive input); precision and XLA against the same model on synthetic data, so that a slow
    input pipeline cannot hide what they buy. With the runs the input analysis reuses, by name."""
    backend = session.base.backend
    base_xla = backend is Backend.jax  # jax always compiles
    baseline = session.run(
        "baseline: fp32, " + ("XLA (always on jax)" if base_xla else "no XLA") + ", naive input",
        "ablation",
        precision=Precision.fp32,
        xla=base_xla,
        data=DataMode.naive,
    )
    runs: dict[str, RunRecord | None] = {}
    runs["synthetic"] = session.run(
        "synthetic data", "ablation", precision=Precision.fp32, xla=base_xla, data=DataMode.synthetic
    )
    runs["pipeline"] = session.run(
        "tuned input pipeline", "ablation", precision=Precision.fp32, xla=base_xla, data=DataMode.pipeline
    )
    model = runs["synthetic"]
    rows = [
        _row("baseline", baseline, baseline, None, "baseline"),
        _row("tuned input pipeline (parallel map, cache, prefetch)", runs["pipeline"], baseline, "input", "baseline"),
        _row("synthetic data on the device (the input ceiling)", model, baseline, "input", "baseline"),
    ]
    for p in precisions:
        if p is not Precision.fp32:
            runs[p.value] = session.run(
                f"{p.value} (model alone)", "ablation", precision=p, xla=base_xla, data=DataMode.synthetic
            )
            rows.append(_row(p.value, runs[p.value], model, "precision", "fp32, synthetic data"))
    if backend is Backend.tensorflow:
        runs["xla"] = session.run(
            "XLA on (model alone)", "ablation", precision=Precision.fp32, xla=True, data=DataMode.synthetic
        )
        rows.append(_row("XLA on (jit_compile=True)", runs["xla"], model, "xla", "fp32, synthetic data"))
    # the best of each factor, together
    good = [r for r in rows if r.factor == "precision" and r.speedup and not (r.loss and r.loss.changed)]
    faster = [r for r in good if r.speedup.ratio > 1]
    best_precision = max(faster, key=lambda r: r.speedup.ratio).label if faster else Precision.fp32.value
    xla_row = next((r for r in rows if r.factor == "xla"), None)
    use_xla = base_xla or bool(xla_row and xla_row.speedup and xla_row.speedup.ratio > 1)
    combined = session.run(
        "combined", "ablation", precision=Precision(best_precision), xla=use_xla, data=DataMode.pipeline
    )
    rows.append(
        _row(
            f"combined: {best_precision}, {'XLA' if use_xla else 'no XLA'}, tuned pipeline",
            combined,
            baseline,
            "combined",
            "baseline",
        )
    )
    found = Ablation(
        baseline_run=baseline.id if baseline else None,
        rows=rows,
        best=BestSetting(precision=best_precision, xla=use_xla),
        note=None if backend is Backend.tensorflow else "the jax backend always compiles with XLA: no XLA-off row",
    )
    return found, runs
