import math

from gpuscout.analysis.flags import input_flag, loss_flag, shared_flag, throttle_flag, variance_flags


def codes(flags):
    return [f.code for f in flags]


def test_high_variance_above_two_percent_only():
    assert codes(variance_flags([100, 100, 100], 0.0201)) == ["high_variance"]
    assert codes(variance_flags([100, 100, 100], 0.02)) == []
    assert codes(variance_flags([100], None)) == []


def test_slow_first_window():
    assert codes(variance_flags([94.0, 100.0, 100.0, 100.0], 0.0)) == ["slow_first_window"]
    assert codes(variance_flags([96.0, 100.0, 100.0, 100.0], 0.0)) == []
    assert codes(variance_flags([90.0, 100.0], 0.0)) == []  # too few windows to judge


def test_power_cap_at_full_clock_is_not_throttling():
    assert throttle_flag(["sw_power_cap"], 1970.6, 1980) is None


def test_power_cap_that_cost_clock_is_throttling():
    flag = throttle_flag(["sw_power_cap"], 1850.0, 1980)
    assert flag.code == "throttled" and "sw_power_cap" in flag.message


def test_thermal_slowdown_is_throttling_at_any_clock():
    assert "hw_thermal_slowdown" in throttle_flag(["hw_thermal_slowdown"], 1980.0, 1980).message


def test_low_clock_without_reason_is_throttling():
    assert throttle_flag([], 1700.0, 1980) is not None
    assert throttle_flag([], 1800.0, 1980) is None  # 90.9% of max
    assert throttle_flag([], None, None) is None


def test_input_bound_bands_follow_the_tf_profiler():
    assert input_flag(0.04) is None
    assert "moderately" in input_flag(0.10).message
    assert "highly" in input_flag(0.25).message
    assert input_flag(None) is None


def test_shared_and_loss_flags():
    assert shared_flag([]) is None
    assert "4242" in shared_flag([4242]).message
    assert loss_flag(2.3) is None
    assert loss_flag(math.nan).code == "loss_not_finite"
    assert loss_flag(math.inf).code == "loss_not_finite"
