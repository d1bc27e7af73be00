import time

import pytest

from gpuscout.analysis.telemetry import summarize_telemetry
from gpuscout.record.child import ChildWindow
from gpuscout.telemetry.fake import FakeNvml
from gpuscout.telemetry.nvml import Nvml, Sample, slowdown_names
from gpuscout.telemetry.sampler import Sampler


def fake(**gpu):
    base = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-0",
        "memory_total_bytes": 80 * 2**30,
        "compute_capability": [9, 0],
        "power_limit_w": 700,
        "sm_clock_max_mhz": 1980,
        "sm_clock_mhz": 1755,
        "utilization_pct": 97,
        "power_w": 650.0,
        "temperature_c": 70,
        "memory_used_bytes": 2**30,
        "clock_event_reasons": 0x40,
        "processes": [{"pid": 7, "used_memory_bytes": 5}],
    }
    base.update(gpu)
    return FakeNvml({"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [base]})


def test_device_info_through_nvml():
    with Nvml(fake()) as nvml:
        assert nvml.available and nvml.count == 1
        assert (nvml.driver_version(), nvml.cuda_driver_version()) == ("550.54.15", "12.4")
        gpu = nvml.gpu(0)
        assert (gpu.name, gpu.compute_capability, gpu.power_limit_w) == ("NVIDIA H100 80GB HBM3", "9.0", 700.0)
        assert [p.model_dump() for p in gpu.compute_processes] == [{"pid": 7, "used_memory_bytes": 5}]
        sample = nvml.sample(0)
        assert (sample.power_w, sample.sm_clock_mhz, sample.clock_event_reasons) == (650.0, 1755, 0x40)


def test_unsupported_fields_are_none_not_a_crash():
    with Nvml(fake(unsupported=["power_w", "temperature_c", "power_limit_w"])) as nvml:
        sample = nvml.sample(0)
        assert sample.power_w is None and sample.temperature_c is None
        assert sample.gpu_util_pct == 97.0
        assert nvml.gpu(0).power_limit_w is None


def test_no_driver_is_reported_not_raised():
    nvml = Nvml(FakeNvml({"init_error": "Driver Not Loaded", "gpus": []}))
    assert not nvml.available and "Driver Not Loaded" in nvml.error
    assert nvml.driver_version() is None


def test_slowdown_reason_names():
    assert slowdown_names(0x40 | 0x4 | 0x1) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert slowdown_names(0) == [] and slowdown_names(None) == []


def test_sampler_runs_at_a_bounded_rate():
    with Nvml(fake()) as nvml:
        sampler = Sampler(nvml, 0, interval_s=0.05).start()
        time.sleep(0.5)
        samples = sampler.stop()
    assert 5 <= len(samples) <= 12
    stamps = [s.t_monotonic_s for s in samples]
    assert stamps == sorted(stamps)


def s(t, power, clock, reasons=0, util=100.0, memory=1000):
    return Sample(
        t_monotonic_s=t,
        gpu_util_pct=util,
        memory_util_pct=50.0,
        memory_used_bytes=memory,
        power_w=power,
        sm_clock_mhz=clock,
        temperature_c=60.0,
        clock_event_reasons=reasons,
    )


def test_summary_uses_only_samples_inside_windows():
    samples = [
        s(0.5, 100.0, 300, memory=5000),  # compile: outside every window
        s(1.5, 600.0, 1980),
        s(2.5, 700.0, 1900, reasons=0x20),
        s(3.5, 50.0, 300),
    ]
    windows = [
        ChildWindow(index=0, start_monotonic_s=1.0, end_monotonic_s=2.0, steps=1, samples=1000, input_wait_s=0),
        ChildWindow(index=1, start_monotonic_s=2.0, end_monotonic_s=3.0, steps=1, samples=1000, input_wait_s=0),
    ]
    t = summarize_telemetry(samples, windows, samples_measured=2000, interval_s=0.1)
    assert t.window_sample_count == 2
    assert t.power_mean_w == 650.0 and t.power_max_w == 700.0
    assert t.energy_j == pytest.approx(650.0 * 2.0)
    assert t.energy_j_per_1000_samples == pytest.approx(650.0)
    assert t.sm_clock_mean_mhz == 1940.0 and t.sm_clock_min_mhz == 1900
    assert t.slowdown_reasons == ["sw_thermal_slowdown"]
    assert t.memory_used_max_bytes == 5000  # memory peak counts the whole run
    assert len(t.samples) == 4
