"""What crosses into the watched script for a `tune -- COMMAND` run (core/tune_settings.py, issue
76): typed, checked where the parent encodes it, read by attribute in the child."""

import json
import re

import pytest

from gpuscout.core.tune_settings import ENV, TuneSettings
from gpuscout.measure.watching import WatchOptions
from gpuscout.record.watch import InputRepeats
from gpuscout.tune.changes import batch_size, cache
from tests.unit.test_tune_script import baseline


def test_a_plans_settings_cross_as_json_and_come_back_the_same():
    made = TuneSettings.from_dict({"batch_size": 256, "learning_rate_factor": 2.0, "warmup_steps": 0})
    text = made.to_json()
    assert json.loads(text) == {"batch_size": 256, "learning_rate_factor": 2.0, "warmup_steps": 0}  # 0 is kept
    assert TuneSettings.from_env({ENV: text}) == made and made.prefetch_depth == 8
    assert not TuneSettings.from_env({}) and not TuneSettings() and made


@pytest.mark.parametrize(
    "values, message",
    [
        ({"batchsize": 256}, "unknown batchsize"),
        ({"batch_size": True}, "batch_size=True is not a int | None"),  # a bool is no count
        ({"workers": "4"}, "workers='4' is not a int | None"),
        ({"cache": 1}, "cache=1 is not a bool"),
        ({"augment_in_model": ["layers"]}, "is not a dict[str, object] | None"),
    ],
)
def test_a_key_no_change_reads_or_a_value_of_another_type_is_refused(values, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TuneSettings.from_dict(values)
    with pytest.raises(ValueError):
        WatchOptions(change_settings=values).settings(None)  # before the run starts, in the parent


def test_the_changes_plans_make_settings_the_wire_takes():
    """Real plans' settings (a generator's cache with its period and fill; a larger batch with its
    learning rate) pass the wire's check and say what they said."""
    r = baseline(input_type="generator", wait_s=0.6)
    r.main.input_repeats = InputRepeats(checked=30, same=30, order="stream", period=20, bytes=2**20)
    (cached,) = cache.cache(r)
    arrays = baseline(input_type="numpy", peak_memory_bytes=2**30)
    arrays.main.optimizer = "Adam"
    larger = batch_size.KIND.plan(arrays, None)
    assert larger and not isinstance(larger, str)
    for change in [cached, *larger]:
        env = WatchOptions(change_settings=change.settings).settings(None)
        assert json.loads(env[ENV]) == change.settings
