"""Each GPU's kernels in a watched script's profiler trace (measure/trace_kernels.py): busy time,
collectives, and collectives with nothing else running, per step; the verdict and the report on
them. A synthetic jax perfetto trace, every figure against a hand computation."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from rich.console import Console

from gpuscout.measure import trace_kernels
from gpuscout.report.watch import print_watch
from tests.records import fit_events, make_watch_record

# (pid, thread, name, hlo op, start us, duration us); pid 1 GPU 0, 2 GPU 1, 3 the host
KERNELS = [
    (1, 10, "loop_fusion_1", "fusion.1", 0, 10_000),
    (1, 11, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "", 5_000, 10_000),
    (1, 10, "nvjet_gemm", "dot.2", 12_000, 2_000),
    (1, 11, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "", 20_000, 4_000),
    (1, 10, "input_reduce_fusion", "fusion.3", 30_000, 6_000),
    (2, 20, "triton_kernel_7", "all-reduce-start.1", 0, 2_000),
    (2, 20, "loop_fusion", "fusion.1", 0, 1_000),
    (1, 12, "ExecuteOnDevice", "", 0, 50_000),  # not a stream of the GPU: not a kernel
    (3, 30, "PjitFunction(train_step)", "", 0, 60_000),
]  # the host's
STEPS = 2


def perfetto() -> dict:
    names = [
        ("process_name", 1, None, "/device:GPU:0"),
        ("process_name", 2, None, "/device:GPU:1"),
        ("process_name", 3, None, "/host:CPU"),
        ("thread_name", 1, 10, "Stream #1(Compute)"),
        ("thread_name", 1, 11, "Stream #2(Collectives)"),
        ("thread_name", 1, 12, "XLA Ops"),
        ("thread_name", 2, 20, "Stream #1"),
        ("thread_name", 3, 30, "python"),
    ]
    events = [
        {"ph": "M", "name": kind, "pid": pid, **({"tid": tid} if tid else {}), "args": {"name": name}}
        for kind, pid, tid, name in names
    ]
    events += [
        {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": {"hlo_op": op}}
        for pid, tid, name, op, ts, dur in KERNELS
    ]
    return {"traceEvents": events}


def test_each_gpus_collectives_and_the_part_with_nothing_beside_them_by_hand(tmp_path):
    folder = tmp_path / "plugins" / "profile" / "2026_11_26"
    folder.mkdir(parents=True)
    with gzip.open(folder / "host.perfetto_trace.json.gz", "wt") as f:
        json.dump(perfetto(), f)
    found, note = trace_kernels.read(tmp_path, STEPS)
    assert note is None
    gpu0, gpu1 = found
    # GPU 0, two steps: kernels over [0, 15], [20, 24], [30, 36] ms: 25 ms busy, 12.5 a step; NCCL over
    # [5, 15] and [20, 24]: 14 ms, 7.0 a step; of it beside no computation [10, 12], [14, 15] and [20, 24]:
    # 7 ms, 3.5 a step; the span 36 ms, 18.0 a step; 5 kernels (the host's and the XLA Ops row are not)
    assert gpu0 == {
        "device": "/device:GPU:0",
        "kernels_per_step": 2.5,
        "busy_ms": 12.5,
        "collectives_ms": 7.0,
        "collectives_alone_ms": 3.5,
        "span_ms": 18.0,
        "slowed_beside_collectives_ms": 0.0,
    }
    # GPU 1: XLA's own all-reduce kernel, known by its HLO op, half of it beside a fusion
    assert gpu1 == {
        "device": "/device:GPU:1",
        "kernels_per_step": 1.0,
        "busy_ms": 1.0,
        "collectives_ms": 1.0,
        "collectives_alone_ms": 0.5,
        "span_ms": 1.0,
        "slowed_beside_collectives_ms": 0.0,
    }
    assert trace_kernels.read(tmp_path / "none", STEPS) == ([], "no trace file to read the kernels from")
    # a truncated file, or JSON that is not a trace: said, never raised (the record is stored after it)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "t.trace.json").write_text('{"traceEvents": [{"ph": "X", "dur": 3}]}')
    assert trace_kernels.read(broken, STEPS) == ([], "the trace's kernels were not read (KeyError: 'pid')")
    (broken / "t.trace.json").write_text('{"traceEvents": [')
    assert trace_kernels.read(broken, STEPS)[1].startswith("the trace's kernels were not read (JSONDecodeError")


def test_tensorflows_xplane_gives_the_same_figures_as_the_perfetto_json(tmp_path, monkeypatch):
    # The same kernels as an XSpace protobuf (TensorFlow's only trace format): each line's events
    # at its timestamp plus their offsets, the op as a string stat or a reference to a stat's name
    from gpuscout.measure import xplane

    pb2 = xplane.schema()
    assert pb2 is not None, "TensorFlow's xplane schema, installed with the test extras"
    space = pb2.XSpace()
    lines = {
        (1, 10): "Stream #1(Compute)",
        (1, 11): "Stream #2(Collectives)",
        (1, 12): "XLA Ops",
        (2, 20): "Stream #1",
        (3, 30): "python",
    }
    planes = {
        pid: space.planes.add(id=pid, name=name)
        for pid, name in ((1, "/device:GPU:0"), (2, "/device:GPU:1"), (3, "/host:CPU"))
    }
    for plane in planes.values():
        plane.stat_metadata[1].name = "hlo_op"
        plane.stat_metadata[2].name = "fusion.1"  # a name the op stat may point to (ref_value)
    made = {}
    for (pid, tid), name in lines.items():
        # a line starting 1 ms in (1,000,000 ns): its events' offsets are from there
        made[(pid, tid)] = planes[pid].lines.add(id=tid, name=name, timestamp_ns=1_000_000 if tid == 11 else 0)
    for number, (pid, tid, name, op, ts_us, dur_us) in enumerate(KERNELS, start=1):
        plane, line = planes[pid], made[(pid, tid)]
        plane.event_metadata[number].name = name
        start_ps = ts_us * 1_000_000 - line.timestamp_ns * 1000
        event = line.events.add(metadata_id=number, offset_ps=start_ps, duration_ps=dur_us * 1_000_000)
        if op == "fusion.1":
            event.stats.add(metadata_id=1, ref_value=2)
        elif op:
            event.stats.add(metadata_id=1, str_value=op)
    folder = tmp_path / "plugins" / "profile" / "2026_11_27"
    folder.mkdir(parents=True)
    (folder / "host.xplane.pb").write_bytes(space.SerializeToString())
    found, note = trace_kernels.read(tmp_path, STEPS)
    assert note is None
    assert found == [
        {
            "device": "/device:GPU:0",
            "kernels_per_step": 2.5,
            "busy_ms": 12.5,
            "collectives_ms": 7.0,
            "collectives_alone_ms": 3.5,
            "span_ms": 18.0,  # as the perfetto test's, by hand
            "slowed_beside_collectives_ms": 0.0,
        },
        {
            "device": "/device:GPU:1",
            "kernels_per_step": 1.0,
            "busy_ms": 1.0,
            "collectives_ms": 1.0,
            "collectives_alone_ms": 0.5,
            "span_ms": 1.0,
            "slowed_beside_collectives_ms": 0.0,
        },
    ]
    kernels = xplane.device_kernels(folder / "host.xplane.pb", pb2)
    assert {k["op"] for k in kernels} == {"fusion.1", "", "dot.2", "fusion.3", "all-reduce-start.1"}
    # a trace over the size limit is said, not parsed
    monkeypatch.setattr(xplane, "MAX_XPLANE_BYTES", 16)  # bytes: the file is larger
    size_mib = (folder / "host.xplane.pb").stat().st_size / 2**20
    assert trace_kernels.read(tmp_path, STEPS) == (
        [],
        f"the trace's kernels were not read: {size_mib:.0f} MiB, over 0 MiB: fewer --trace-steps",
    )
    # without TensorFlow beside gpuscout there is no schema to read it with: said
    monkeypatch.setattr(xplane, "MAX_XPLANE_BYTES", 128 << 20)
    monkeypatch.setattr(xplane, "schema", lambda: None)
    assert trace_kernels.read(tmp_path, STEPS) == ([], xplane.NO_SCHEMA)


def test_computation_slowed_beside_the_collectives_by_hand():
    """Each name's kernels beside an all-reduce against the median of the same name's alone."""

    def kernel(name, start_ms, dur_ms):
        return {"name": name, "ts_us": start_ms * 1000, "dur_us": dur_ms * 1000, "op": "", "device": "/device:GPU:0"}

    nccl = kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 10)  # [10, 20] ms
    kernels = [
        nccl,
        kernel("gemm", 0, 1.0),
        kernel("gemm", 2, 1.2),  # alone: median 1.1 ms
        kernel("gemm", 10, 1.5),
        kernel("gemm", 12, 1.6),  # beside: 0.4 + 0.5 ms beyond it
        kernel("gemm", 19.5, 2.0),  # a quarter of it beside: neither beside nor alone
        kernel("gemm_b", 4, 1.0),
        kernel("gemm_b", 14, 2.0),  # one alone: no usual time, not counted
        kernel("fusion", 6, 1.0),
        kernel("fusion", 8, 1.0),
        kernel("fusion", 16.5, 0.8),
    ]  # faster: 0, not -0.2
    computing = [k for k in kernels if k is not nccl]
    assert trace_kernels.slowed_beside(computing, [(10_000, 20_000)]) == pytest.approx(900)
    assert trace_kernels.covered([(0, 4), (3, 12), (30, 31)], [(2, 5), (10, 20)]) == [2, 2 + 2, 0]
    # two steps traced: 0.45 ms a step
    (gpu0,) = trace_kernels.per_device(kernels, steps=2)
    assert gpu0["slowed_beside_collectives_ms"] == pytest.approx(0.45)


def test_uncovered_parts_by_hand():
    assert trace_kernels.merged([(5, 7), (0, 2), (1, 3)]) == [(0, 3), (5, 7)]
    # [0, 10] less [2, 3] and [5, 12]: 2 + 2 = 4; [20, 30] less nothing: 10
    assert trace_kernels.uncovered([(0, 10), (20, 30)], [(2, 3), (5, 12)]) == 4 + 10
    assert trace_kernels.uncovered([(0, 10)], [(-5, 20)]) == 0


def test_waited_collectives_are_a_cause_and_each_gpu_is_printed():
    events = fit_events(wait_s=0.0, input_type="numpy", batch=128)
    events[1].update(replicas=2, devices=2, strategy="DataParallel")
    gpus = [
        {
            "device": "/device:GPU:0",
            "kernels_per_step": 2.5,
            "busy_ms": 12.5,
            "collectives_ms": 7.0,
            "collectives_alone_ms": 3.5,
            "span_ms": 18.0,
        },
        {
            "device": "/device:GPU:1",
            "kernels_per_step": 1.0,
            "busy_ms": 1.0,
            "collectives_ms": 1.0,
            "collectives_alone_ms": 0.5,
            "span_ms": 1.0,
        },
    ]
    trace = {
        "event": "watch_trace",
        "pid": 100,
        "dir": "/tmp/t",
        "first_step": 5,
        "last_step": 6,
        "ok": True,
        "message": None,
        "devices": gpus,
    }
    r = make_watch_record(events=[*events, trace])
    waited = next(c for c in r.verdict if c.code == "collectives_waited")
    # GPU 1's 0.5 of 1.0 ms (50%) is the larger share than GPU 0's 3.5 of 18 (19%)
    assert waited.saving_share == pytest.approx(0.5)
    assert waited.message == "the step waits for its all-reduce: 0.5 ms of 1.0 with nothing else running on GPU 1"
    assert "GPU 0 collectives 7.0 ms a step, 3.5 ms alone" in waited.evidence and "larger than 64" in waited.fix
    out = io.StringIO()
    print_watch(Console(file=out, width=80), r)
    text = " ".join(out.getvalue().split())
    assert (
        "GPU 0: kernels 12.5 ms a step of a 18.0 ms span; collectives 7.0 ms, 3.5 ms of them with nothing else running"
    ) in text
    # under a tenth of the step, or one replica: not a cause
    for share_gpu1, replicas in ((0.09, 2), (0.5, 1)):
        quiet = [gpus[0] | {"collectives_alone_ms": 1.0}, gpus[1] | {"collectives_alone_ms": share_gpu1}]
        events[1].update(replicas=replicas)
        r = make_watch_record(events=[*events, trace | {"devices": quiet}])
        assert "collectives_waited" not in [c.code for c in r.verdict]


def test_computation_slowed_beside_the_collectives_is_a_cause_from_a_fiftieth_of_the_step():
    """GPT-2 small's four H200s lost 1.1 ms of 34.5 a step this way (docs/benchmarks.md): named, with
    each GPU's figure and the change; 0.5 ms of 34.5 is not; the report prints each GPU's."""
    events = fit_events(wait_s=0.0, input_type="numpy", batch=64)
    events[1].update(replicas=4, devices=4, strategy="DataParallel")
    gpus = [
        {
            "device": f"/device:GPU:{i}",
            "kernels_per_step": 774.0,
            "busy_ms": 33.8,
            "collectives_ms": 5.6,
            "collectives_alone_ms": 0.8,
            "span_ms": 34.5,
            "slowed_beside_collectives_ms": slowed,
        }
        for i, slowed in enumerate((1.1, 0.9, 1.0, 0.95))
    ]
    trace = {
        "event": "watch_trace",
        "pid": 100,
        "dir": "/tmp/t",
        "first_step": 60,
        "last_step": 62,
        "ok": True,
        "message": None,
        "devices": gpus,
    }
    r = make_watch_record(events=[*events, trace])
    slowed = next(c for c in r.verdict if c.code == "compute_slowed_by_collectives")
    assert slowed.saving_share == pytest.approx(1.1 / 34.5)
    assert slowed.message == (
        "computation runs slower beside the all-reduce: 1.1 ms a step of 34.5 on GPU 0, "
        "beyond what the same kernels take with no collective running"
    )
    assert "GPU 1 0.9 ms slower beside 5.6 ms of collectives" in slowed.evidence
    assert "larger than 16" in slowed.fix and "NCCL_MAX_CTAS" in slowed.fix
    # on jax, Keras' own accumulation is no way to more samples per exchange: said; on tensorflow not claimed
    assert "gradient_accumulation_steps would not: on jax it adds up gradients already exchanged" in slowed.fix
    tf_events = fit_events(wait_s=0.0, input_type="numpy", batch=64, backend="tensorflow")
    tf_events[1].update(replicas=4, devices=4, strategy="MirroredStrategy")
    on_tf = make_watch_record(events=[*tf_events, trace])
    assert (
        "gradient_accumulation_steps"
        not in next(c for c in on_tf.verdict if c.code == "compute_slowed_by_collectives").fix
    )
    out = io.StringIO()
    print_watch(Console(file=out, width=80), r)
    assert "0.8 ms of them with nothing else running; computation beside them 1.1 ms slower" in " ".join(
        out.getvalue().split()
    )
    quiet = [g | {"slowed_beside_collectives_ms": 0.5} for g in gpus]
    r = make_watch_record(events=[*events, trace | {"devices": quiet}])
    assert "compute_slowed_by_collectives" not in [c.code for c in r.verdict]
