"""Building valid stored records in tests: a complete RunRecord from a few figures."""

from __future__ import annotations

from gpuscout.core.spec import RunSpec
from gpuscout.record.run import Environment, RunRecord, Throughput, Window


def windows_at(rates: list[float], samples: int = 640, start: float = 100.0) -> list[Window]:
    """Back-to-back windows of `samples` samples each at the given rates (samples/s)."""
    out = []
    for i, rate in enumerate(rates):
        out.append(
            Window(
                index=i,
                start_monotonic_s=start,
                end_monotonic_s=start + samples / rate,
                steps=10,
                samples=samples,
                input_wait_s=0.0,
                seconds=samples / rate,
                throughput=rate,
            )
        )
        start += samples / rate
    return out


def make_record(
    run_id: str = "run00001",
    workload: str = "mlp",
    median: float = 100.0,
    *,
    rates: list[float] | None = None,
    backend: str = "jax",
    precision: str = "fp32",
    batch_size: int = 64,
    status: str = "ok",
    **changes,
) -> RunRecord:
    """A CPU run of `workload` whose windows ran at `rates` (default: three at `median`)."""
    rates = rates or [median] * 3
    ordered = sorted(rates)
    middle = ordered[len(ordered) // 2]
    ok = status == "ok"
    spec = RunSpec(workload=workload, backend=backend, precision=precision, batch_size=batch_size)
    fields = dict(
        id=run_id,
        created_utc="2026-11-21T00:00:00+00:00",
        group_id="g1",
        repeat_index=0,
        workload=workload,
        backend=backend,
        precision=precision,
        xla=True,
        batch_size=batch_size,
        devices=1,
        per_device_batch_size=batch_size,
        data="synthetic",
        device="cpu",
        status=status,
        duration_s=10.0,
        unit="samples/s",
        units_per_sample=1,
        throughput=Throughput(
            n=len(rates),
            median=middle,
            mean=sum(rates) / len(rates),
            min=ordered[0],
            max=ordered[-1],
            iqr=0.0,
            cv=None,
            ci95_low=ordered[0],
            ci95_high=ordered[-1],
            unit="samples/s",
        )
        if ok
        else None,
        samples_per_s=middle if ok else None,
        step_time_s=batch_size / middle if ok else None,
        windows=windows_at(rates) if ok else [],
        error=None if ok else {"message": "it failed", "stderr_tail": "", "returncode": 1},
        spec=spec,
        env=Environment(gpuscout_version="0.1.0", methodology_version=1, schema_version=2),
        gpuscout_version="0.1.0",
        methodology_version=1,
    )
    fields.update(changes)
    return RunRecord(**fields)


def fit_events(
    *,
    windows: int = 3,
    steps: int = 50,
    batch: int = 64,
    window_s: float = 1.0,
    wait_s: float = 0.3,
    outside_s: float = 0.05,
    policy: str = "float32",
    backend: str = "jax",
    input_type: str = "generator",
    forward_flops: float | None = 1e9,
    jit_compile: bool = True,
    peak_memory_bytes: int | None = None,
    start: float = 1000.0,
    pid: int = 100,
    batch_bytes: int | None = None,
) -> list[dict]:
    """The events the instrumentation sends for one fit: `windows` windows of `window_s` seconds,
    each of `steps` steps of `batch` samples, `wait_s` of it blocked on the next batch."""
    events = [
        {"event": "watch_hooked", "pid": pid},
        {
            "event": "watch_fit",
            "pid": pid,
            "fit": 1,
            "backend": backend,
            "keras_version": "3.15.1",
            "model": "m",
            "params": 1000,
            "input_type": input_type,
            "precision_policy": policy,
            "compute_dtype": "float32",
            "jit_compile": jit_compile,
            "steps_per_execution": 1,
            "strategy": None,
            "replicas": 1,
            "forward_flops": forward_flops,
            "flops_coverage": 1.0,
            "batch_size": batch,
            "batch_bytes": batch_bytes,
            "compile_s": 2.0,
            "started_monotonic_s": start - 2.0,
            "epochs": 1,
            "steps_per_epoch": None,
        },
    ]
    for i in range(windows):
        events.append(
            {
                "event": "watch_window",
                "pid": pid,
                "fit": 1,
                "index": i,
                "start_monotonic_s": start + i * window_s,
                "end_monotonic_s": start + (i + 1) * window_s,
                "steps": steps,
                "samples": steps * batch,
                "input_wait_s": wait_s,
                "outside_step_s": outside_s,
            }
        )
    end = start + windows * window_s
    events.append(
        {
            "event": "watch_epoch",
            "pid": pid,
            "fit": 1,
            "epoch": 1,
            "start_monotonic_s": start,
            "end_monotonic_s": end,
            "epoch_end_monotonic_s": end,
            "steps": windows * steps,
            "samples": windows * steps * batch,
            "logs": {"loss": 0.5, "val_accuracy": 0.9},
        }
    )
    events.append(
        {
            "event": "watch_fit_end",
            "pid": pid,
            "fit": 1,
            "steps": windows * steps + 1,
            "samples": (windows * steps + 1) * batch,
            "peak_memory_bytes": peak_memory_bytes,
            "stopped_by_limit": False,
        }
    )
    return events


def decoded(events: list[dict]) -> list:
    """`events` as core/watch_events decodes them; an event that does not decode is a broken fixture."""
    from gpuscout.core import watch_events

    out = [watch_events.decode(e) for e in events]
    broken = [e for e, made in zip(events, out) if made is None]
    assert not broken, f"not watch events: {broken}"
    return out


def make_watch_record(
    record_id: str = "watch0001",
    events: list[dict] | None = None,
    *,
    gpus=(),
    samples=(),
    status: str = "ok",
    exit_code: int | None = 0,
    workload: str = "train.py",
    **observed,
):
    """A WatchRecord derived (analysis/watch.py) from synthetic events and telemetry, each event
    decoded as the parent decodes the channel's (one that would not decode fails the test)."""
    from gpuscout.analysis.watch import Observed, derive

    seen = Observed(
        command=["python", workload],
        workload=workload,
        mode="command",
        status=status,
        exit_code=exit_code,
        duration_s=10.0,
        events=decoded(fit_events() if events is None else events),
        environment={"gpuscout_version": "0.1.0", "methodology_version": 1, "schema_version": 2, "cpu_count": 8},
        group_id="g1",
        record_id=record_id,
        created_utc="2026-11-21T00:00:00+00:00",
        gpus=list(gpus),
        samples=list(samples),
        **{"child_env": {}, **observed},
    )
    return derive(seen)


def scale_point(devices: int = 1, status: str = "ok", **fields):
    """One count of a `scale` report (scale/results.Point), every field not given plain."""
    from gpuscout.scale.results import Point

    plain = dict(
        devices=devices,
        run_id=f"run{devices}",
        status=status,
        message=None,
        explained=None,
        batch_size=8 * devices,
        per_device_batch_size=8,
        samples_per_s=100.0 if status == "ok" else None,
        ci95=None,
        step_time_s=None,
        expected_efficiency=1.0 if devices == 1 else 0.9,
        link=None,
        input_wait_share=None,
        all_reduce=None,
        batchnorm=None,
        communication=None,
        collectives=None,
        per_gpu=[],
        flags=[],
        mfu=None,
        peak_memory_bytes=None,
    )
    return Point.model_validate({**plain, **fields})
