"""Building valid stored records in tests: a complete RunRecord from a few figures."""

from __future__ import annotations

from gpuscout.record.run import Environment, RunRecord, Throughput, Window
from gpuscout.spec import RunSpec


def windows_at(rates: list[float], samples: int = 640, start: float = 100.0) -> list[Window]:
    """Back-to-back windows of `samples` samples each at the given rates (samples/s)."""
    out = []
    for i, rate in enumerate(rates):
        out.append(Window(index=i, start_monotonic_s=start, end_monotonic_s=start + samples / rate, steps=10,
                          samples=samples, input_wait_s=0.0, seconds=samples / rate, throughput=rate))
        start += samples / rate
    return out


def make_record(run_id: str = "run00001", workload: str = "mlp", median: float = 100.0, *,
                rates: list[float] | None = None, backend: str = "jax", precision: str = "fp32",
                batch_size: int = 64, status: str = "ok", **changes) -> RunRecord:
    """A CPU run of `workload` whose windows ran at `rates` (default: three at `median`)."""
    rates = rates or [median] * 3
    ordered = sorted(rates)
    middle = ordered[len(ordered) // 2]
    ok = status == "ok"
    spec = RunSpec(workload=workload, backend=backend, precision=precision, batch_size=batch_size)
    fields = dict(
        id=run_id, created_utc="2026-11-21T00:00:00+00:00", group_id="g1", repeat_index=0, workload=workload,
        backend=backend, precision=precision, xla=True, batch_size=batch_size, devices=1,
        per_device_batch_size=batch_size, data="synthetic", device="cpu", status=status, duration_s=10.0,
        unit="samples/s", units_per_sample=1,
        throughput=Throughput(n=len(rates), median=middle, mean=sum(rates) / len(rates), min=ordered[0],
                              max=ordered[-1], iqr=0.0, cv=None, ci95_low=ordered[0], ci95_high=ordered[-1],
                              unit="samples/s") if ok else None,
        samples_per_s=middle if ok else None, step_time_s=batch_size / middle if ok else None,
        windows=windows_at(rates) if ok else [],
        error=None if ok else {"message": "it failed", "stderr_tail": "", "returncode": 1},
        spec=spec, env=Environment(gpuscout_version="0.1.0", methodology_version=1, schema_version=2),
        gpuscout_version="0.1.0", methodology_version=1)
    fields.update(changes)
    return RunRecord(**fields)
