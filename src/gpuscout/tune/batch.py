"""The largest batch that fits, and throughput against batch size with its knee."""

from __future__ import annotations

from gpuscout.core.errors import RunError
from gpuscout.core.spec import DataMode, Precision
from gpuscout.tune.ablation import throughput
from gpuscout.tune.session import Session
from gpuscout.tune.workload_results import BatchPoint, BatchProbe, BatchSearch

KNEE_SHARE = 0.90
BATCH_STEP = 8  # batches found by the search are multiples of this (of 1 below it)


def _round_batch(value: float) -> int:
    return max(1, int(value) // BATCH_STEP * BATCH_STEP if value >= BATCH_STEP else int(value))


def batch_search(session: Session, precision: Precision, use_xla: bool) -> BatchSearch:
    start = session.base.batch_size
    on_gpu = session.base.gpu_index is not None
    cap = session.options.max_batch or start * (64 if on_gpu else 8)
    probe = dict(
        precision=precision,
        xla=use_xla,
        data=DataMode.synthetic,
        warmup_steps=1,
        windows=1,
        window_steps=2,
        window_seconds=0.0,
    )
    probes: list[BatchProbe] = []

    def fits(batch: int) -> bool | None:
        record = session.run(f"probe batch {batch}", "batch_probe", batch_size=batch, **probe)
        if record is None:
            return None
        message = record.error.message if record.error else None
        probes.append(
            BatchProbe(
                batch_size=batch,
                status=record.status,
                run_id=record.id,
                peak_memory_bytes=record.peak_memory_bytes,
                message=message,
            )
        )
        if record.status not in ("ok", "oom"):
            raise RunError(f"the batch probe at {batch} ended {record.status}: {message}")
        return record.ok

    lo, hi, limited_by = None, None, "memory"
    batch = start
    while True:
        ok = fits(batch)
        if ok is None:
            limited_by = "budget"
            break
        if not ok:
            hi = batch
            break
        lo = batch
        if batch >= cap:
            limited_by = "cap"
            break
        batch = min(batch * 2, cap)
    if lo is None and hi is not None:  # even the default does not fit: search down
        batch = hi
        while batch > 1 and lo is None:
            batch //= 2
            ok = fits(batch)
            if ok is None:
                break
            if ok:
                lo = batch
            else:
                hi = batch
    while lo is not None and hi is not None and hi - lo > (BATCH_STEP if lo >= BATCH_STEP else 1):
        middle = _round_batch((lo + hi) / 2)
        if middle <= lo or middle >= hi:
            break
        ok = fits(middle)
        if ok is None:
            limited_by = "budget"
            break
        lo, hi = (middle, hi) if ok else (lo, middle)
    if lo is None:
        return BatchSearch(largest=None, probes=probes, limited_by=limited_by, curve=[], knee=None)
    points = sorted({b for b in (start, lo // 8, lo // 4, lo // 2, lo) if b >= 1}, reverse=True)
    points = sorted({_round_batch(b) for b in points})
    curve = []
    for b in points:
        record = session.run(
            f"batch {b}", "batch_curve", batch_size=b, precision=precision, xla=use_xla, data=DataMode.synthetic
        )
        if record is not None:
            curve.append(
                BatchPoint(
                    batch_size=b,
                    run_id=record.id,
                    status=record.status,
                    samples_per_s=throughput(record),
                    throughput=record.throughput.model_dump() if record.throughput else None,
                    peak_memory_bytes=record.peak_memory_bytes,
                )
            )
    measured = [c for c in curve if c.samples_per_s]
    knee = None
    if measured:
        best = max(c.samples_per_s for c in measured)
        knee = min(c.batch_size for c in measured if c.samples_per_s >= KNEE_SHARE * best)
    return BatchSearch(
        largest=lo,
        first_oom=hi,
        limited_by=limited_by if hi is None else "memory",
        cap=cap,
        probes=probes,
        curve=curve,
        knee=knee,
        default=start,
    )
