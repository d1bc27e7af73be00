"""Watch's verdict and tune's plan for a script that could train on several devices (issue 48),
on records derived from synthetic events, every figure against a hand computation."""

from __future__ import annotations

import pytest

from gpuscout.analysis import devices
from gpuscout.record.run import GpuInfo
from gpuscout.report.watch import _figures
from gpuscout.tune import judging, script
from gpuscout.tune.changes import data_parallel
from tests.records import fit_events, make_watch_record
from tests.watch_records import busy

H100S = [
    GpuInfo(
        index=i,
        name="NVIDIA H100 80GB HBM3",
        memory_total_bytes=80 * 2**30,
        compute_capability="9.0",
        sm_clock_max_mhz=1980,
    )
    for i in range(2)
]


def spread(*, replicas: int, devices_seen: int, strategy: str | None = None, **kwargs) -> list[dict]:
    events = fit_events(**kwargs)
    events[1].update(replicas=replicas, devices=devices_seen, strategy=strategy)
    return events


def test_devices_left_idle_are_ranked_by_the_computing_share_they_could_take():
    # 0.1 s of each 1 s window waiting for input: 90% of the time computes, and 1 of 2 devices idled
    r = make_watch_record(events=spread(replicas=1, devices_seen=2, wait_s=0.1, input_type="numpy", batch=128))
    unused = next(c for c in r.verdict if c.code == "devices_unused")
    assert unused.saving_share == pytest.approx((1 - 1 / 2) * 0.9)
    assert unused.message.startswith("1 of the 2 devices this process sees sat idle")
    assert "DataParallel()" in unused.code_snippet and "batch_size=256" in unused.code_snippet
    assert "learning rate" in unused.fix
    # TensorFlow's lines build the model inside a MirroredStrategy scope
    tf = make_watch_record(events=spread(replicas=1, devices_seen=4, backend="tensorflow", wait_s=0.0))
    lines = next(c for c in tf.verdict if c.code == "devices_unused").code_snippet
    assert "MirroredStrategy()" in lines and "with strategy.scope():" in lines and "batch_size=256" in lines
    # every device in use, or one device only: nothing to say
    for replicas, seen in ((2, 2), (1, 1), (1, None)):
        r = make_watch_record(events=spread(replicas=replicas, devices_seen=seen, wait_s=0.0))
        assert "devices_unused" not in [c.code for c in r.verdict]


def test_starved_gpus_with_a_sliver_of_the_batch_each_are_told_to_grow_it():
    # 4 replicas of a global batch of 64: 16 per device, the GPUs 40% busy, no input wait
    events = spread(replicas=4, devices_seen=4, strategy="DataParallel", wait_s=0.0, batch=64, input_type="numpy")
    r = make_watch_record(events=events, gpus=H100S[:1], samples=[busy(40)])
    small = r.verdict[0]
    assert small.code == "small_device_batch" and small.saving_share == pytest.approx(0.6)
    assert "a per-device batch of 16 (64 over 4 devices)" in small.message
    assert small.code_snippet == f"model.fit(..., batch_size={devices.SMALL_DEVICE_BATCH * 4})"
    assert "host_bound" not in [c.code for c in r.verdict]
    # 128 per device: the same starvation is the host's, said for several devices
    events = spread(replicas=4, devices_seen=4, strategy="DataParallel", wait_s=0.0, batch=512, input_type="numpy")
    host = make_watch_record(events=events, gpus=H100S[:1], samples=[busy(40)]).verdict[0]
    assert host.code == "host_bound" and "on 4 devices the host dispatches every step for each" in host.message


def test_one_host_input_for_several_devices_is_said_in_the_input_finding():
    r = make_watch_record(
        events=spread(replicas=2, devices_seen=2, strategy="DataParallel", wait_s=0.8),
        gpus=H100S[:1],
        samples=[busy(20)],
    )
    first = r.verdict[0]
    assert first.code == "input_bound" and "one host input feeds 2 devices" in first.message


def test_the_gpu_the_others_wait_for_is_named():
    events = spread(replicas=2, devices_seen=2, strategy="DataParallel", wait_s=0.0, input_type="numpy")
    r = make_watch_record(events=events, gpus=H100S, samples=[busy(95), busy(70)])
    straggler = next(c for c in r.verdict if c.code == "straggler")
    assert straggler.message.startswith("GPU 0 is the straggler: busy 95%")
    assert "GPU 1 70%" in straggler.evidence and straggler.saving_share == pytest.approx(0.25)
    even = make_watch_record(events=events, gpus=H100S, samples=[busy(95), busy(85)])
    assert "straggler" not in [c.code for c in even.verdict]
    # what watch prints: where the step ran and its batch per device
    assert "devices: the step ran on 2 of 2 (DataParallel); batch 64 global, 32 per device" in _figures(r)


def test_the_trace_names_the_straggler_that_nvml_sees_as_busy_as_the_rest():
    # NVML counts the GPUs waiting in NCCL's kernel as busy. From the trace, computing
    # a step (busy less collectives alone): GPU 0 20.0 - 0.5 = 19.5 ms, GPUs 1-3 20.0 - 2.0 = 18.0,
    # 20.1 - 2.1 = 18.0, 19.9 - 1.8 = 18.1; median of the others 18.0; GPU 0 1.5 ms longer (8.3%),
    # which the others wait: a 1.5 ms saving of GPU 0's 22.0 ms span, 6.8%.
    events = spread(replicas=4, devices_seen=4, strategy="DataParallel", wait_s=0.0, input_type="numpy")
    gpus = [("0", 20.0, 0.5), ("1", 20.0, 2.0), ("2", 20.1, 2.1), ("3", 19.9, 1.8)]
    traced = [
        {
            "device": f"/device:GPU:{i}",
            "kernels_per_step": 300.0,
            "busy_ms": b,
            "collectives_ms": 4.0,
            "collectives_alone_ms": alone,
            "span_ms": 22.0,
        }
        for i, b, alone in gpus
    ]
    trace = {
        "event": "watch_trace",
        "pid": 100,
        "dir": "/tmp/t",
        "first_step": 5,
        "last_step": 9,
        "ok": True,
        "message": None,
        "devices": traced,
    }
    four = H100S + [GpuInfo(**{**H100S[0].model_dump(), "index": i, "uuid": f"GPU-{i}"}) for i in (2, 3)]
    nvml = [busy(95), busy(75), busy(75), busy(75)]  # NVML's busy shares name a straggler too (20 points)
    assert devices.uneven(make_watch_record(events=events, gpus=four, samples=nvml)) is not None
    r = make_watch_record(events=[*events, trace], gpus=four, samples=nvml)
    stragglers = [c for c in r.verdict if c.code == "straggler"]
    assert len(stragglers) == 1  # the trace's finding, not NVML's besides
    assert stragglers[0].message == (
        "GPU 0 is the straggler: it computes 1.5 ms a step longer than the others, which wait for it in the all-reduce"
    )
    assert stragglers[0].saving_share == pytest.approx(1.5 / 22.0)
    assert (
        "GPU 0 19.5 ms, the others 18.0-18.1 ms; their collectives alone 1.8-2.1 ms against 0.5 ms"
        in stragglers[0].evidence
        and "nvidia-smi -q -d PERFORMANCE -i 0" in stragglers[0].fix
    )
    # within 5% of each other (19.5 against 18.8: 3.7%): none
    near = [t | {"busy_ms": 20.8, "collectives_alone_ms": 2.0} for t in traced[1:]]
    even = make_watch_record(
        events=[*events, trace | {"devices": [traced[0], *near]}], gpus=four, samples=[busy(95)] * 4
    )
    assert "straggler" not in [c.code for c in even.verdict]


def test_tune_offers_data_parallel_on_jax_and_on_tensorflow_each_with_its_own_lines():
    r = make_watch_record(events=spread(replicas=1, devices_seen=2, wait_s=0.0, input_type="numpy", batch=128))
    changes = data_parallel.data_parallel(r)
    assert [(c.name, c.knob, c.settings) for c in changes] == [
        ("data_parallel", "data_parallel", {"data_parallel": True}),
        ("data_parallel_batch", "data_parallel", {"data_parallel": True, "batch_size": 256}),
    ]
    assert "learning rate" in changes[1].why and "batch_size=256" in changes[1].line
    generator = make_watch_record(events=spread(replicas=1, devices_seen=2, wait_s=0.0, input_type="generator"))
    assert [c.name for c in data_parallel.data_parallel(generator)] == ["data_parallel"]  # its batches are its own
    assert "set_distribution" in changes[0].line and "MirroredStrategy" not in changes[0].line
    tf = make_watch_record(
        events=spread(replicas=1, devices_seen=2, backend="tensorflow", wait_s=0.0, input_type="numpy", batch=128)
    )
    tf_changes = data_parallel.data_parallel(tf)
    assert [(c.name, c.settings) for c in tf_changes] == [
        ("data_parallel", {"data_parallel": True}),
        ("data_parallel_batch", {"data_parallel": True, "batch_size": 256}),
    ]
    assert all("with strategy.scope():" in c.line and "set_distribution" not in c.line for c in tf_changes)
    one = make_watch_record(events=spread(replicas=1, devices_seen=1, wait_s=0.0))
    assert data_parallel.data_parallel(one) == "jax sees one device"
    everywhere = make_watch_record(events=spread(replicas=2, devices_seen=2, strategy="DataParallel", wait_s=0.0))
    assert data_parallel.data_parallel(everywhere) == "the step runs on all 2 devices already (DataParallel)"


def test_idle_devices_ranked_first_put_data_parallel_first_in_the_plan():
    """A --budget-minutes may end a round early: the change for the largest saving goes first."""
    idle = make_watch_record(
        events=spread(replicas=1, devices_seen=4, wait_s=0.0, input_type="numpy", batch=128, jit_compile=False)
    )
    assert idle.verdict[0].code == "devices_unused"
    names = [c.name for c in script.plan(idle).changes]
    assert names[:2] == ["data_parallel", "data_parallel_batch"] and "jit_compile" in names[2:]
    fed = make_watch_record(
        events=spread(replicas=1, devices_seen=2, wait_s=0.6, input_type="generator", jit_compile=False)
    )
    assert fed.verdict[0].code == "input_bound"  # the input caps the step: its fixes stay first
    assert script.plan(fed).changes[-1].knob == "data_parallel"


def test_a_data_parallel_row_says_its_scaling_efficiency():
    """2 devices against the one-device runs beside it: 1.8x is 90% efficiency."""
    base = [
        make_watch_record(f"b{i}", events=spread(replicas=1, devices_seen=2, wait_s=0.0, steps=50)) for i in range(2)
    ]
    fast = make_watch_record(
        "dp", events=spread(replicas=2, devices_seen=2, strategy="DataParallel", wait_s=0.0, steps=90)
    )
    change = data_parallel.data_parallel(base[0])[0]
    row = judging.judged(change, [fast], base, 64)
    assert row.ratio == pytest.approx(1.8) and row.devices == 2 and row.efficiency == pytest.approx(0.9)
    from gpuscout.report.tune_script import _gain

    assert "; 2 devices, 90% scaling efficiency" in _gain(row)


def test_a_batch_split_by_a_tf_distribute_strategy_counts_all_its_replicas():
    import numpy as np

    from gpuscout.child.fit_input import leading_samples

    class PerReplica:  # tf.distribute's: `values` holds one part of the global batch per device
        def __init__(self, *values):
            self.values = values

    x = PerReplica(np.zeros((64, 8)), np.zeros((64, 8)))
    assert leading_samples((x, PerReplica(np.zeros(64), np.zeros(64)))) == 128
    assert leading_samples(({"a": np.zeros((32, 2))}, None)) == 32
    assert leading_samples((PerReplica(np.zeros((64, 8)), object()),)) is None  # a part without a shape
