"""`tune -- COMMAND`'s decisions (tune/script.py) on synthetic watch records: which changes a
baseline makes worth trying and why the others are not, the loss check at equal steps, the noisy
baseline, and the contrast of windows by hand."""

import math

import pytest

from gpuscout.analysis.compare import contrast
from gpuscout.record.watch import InputRepeats
from gpuscout.tune import script
from tests.records import fit_events, make_watch_record
from tests.unit.test_watch_logic import H100, busy


def baseline(**kw):
    gpu = kw.pop("gpu", True)
    events = fit_events(**{"wait_s": 0.0, **kw})
    return make_watch_record(events=events, gpus=[H100] if gpu else [], samples=[busy(95)] if gpu else [])


def test_a_jax_script_without_jit_on_arrays_on_a_gpu():
    planned = script.plan(baseline(jit_compile=False, input_type="numpy", peak_memory_bytes=2**30))
    names = [c.name for c in planned.changes]
    assert names == ["jit_compile", "mixed_precision", "device_batches", "batch_size_x2", "batch_size_x4"]
    mixed = next(c for c in planned.changes if c.knob == "mixed_precision")
    assert mixed.settings == {"mixed_precision": "mixed_bfloat16"}  # compute capability 9.0
    skipped = {s.knob: s.reason for s in planned.skipped}
    assert skipped["steps_per_execution"].startswith("the step runs op by op")
    assert skipped["workers"] == "the input is numpy, not a PyDataset"


def test_a_tensorflow_pydataset_that_waits_on_a_cpu():
    r = baseline(backend="tensorflow", input_type="PyDataset", jit_compile=False, wait_s=0.6, gpu=False)
    planned = script.plan(r)
    # a batch waits 0.6 s / 50 = 12 ms against 20 - 12 = 8 ms of the rest of a step: ceil(12 / 8) + 1 = 3 workers
    assert [c.name for c in planned.changes] == ["workers_3_threads", "workers_3_processes"]
    skipped = {s.knob: s.reason for s in planned.skipped}
    assert "Keras turns XLA off on a CPU-only TensorFlow" in skipped["jit_compile"]
    assert skipped["mixed_precision"] == "no GPU: mixed precision buys nothing on a CPU"
    assert skipped["steps_per_execution"].startswith("the loop waits for input (60%")
    assert script.plan(r, only=("workers",), skip=()).skipped == []
    assert [s.reason for s in script.plan(r, skip=("workers",)).skipped if s.knob == "workers"] == ["--skip"]


def test_loss_at_equal_steps_and_a_noisy_baseline():
    base = baseline()
    worse = baseline()
    base.main.last_loss, worse.main.last_loss = 0.5, 0.9
    assert "0.9 after 151 steps against the baseline's 0.5" in script.health(worse, base)
    worse.main.last_loss = 0.7  # 1.4x: not clearly worse
    assert script.health(worse, base) is None
    worse.main.last_loss = math.nan
    assert script.health(worse, base).startswith("the loss is nan")
    again = baseline(window_s=0.5)  # the same steps in half the time: 2x, and the intervals apart
    assert "apart" in script.noisy(base, again)
    assert script.noisy(base, baseline()) is None


def test_contrast_by_hand():
    c = contrast([2.0, 2.1, 1.9, 2.05], [1.0, 1.05, 0.95, 1.02])
    assert c.ratio == pytest.approx(2.025 / 1.01) and c.verdict == "faster" and c.test == "mann-whitney"
    assert c.p_value == pytest.approx(2 / math.comb(8, 4))  # every change window above every baseline one
    tie = contrast([1.0, 1.0], [1.0, 1.0])
    assert tie.ratio == 1.0 and tie.verdict == "no significant difference"


def test_unknown_change_names_are_refused():
    with pytest.raises(Exception, match="unknown change 'xla': choose from jit_compile"):
        script.check_names(("xla",), "--only")


def test_cache_is_offered_only_for_batches_seen_to_repeat():
    r = baseline(backend="tensorflow", input_type="PyDataset", wait_s=0.6, gpu=False)
    reasons = {}
    for repeats in (None, {"checked": 4, "same": 3, "batches": 22}, {"checked": 4, "same": 4, "batches": 20,
                                                                      "bytes": 3 * 2**20}):
        r.main.input_repeats = repeats and InputRepeats(**repeats)
        found = script._cache(r)
        reasons[str(repeats and repeats["same"])] = found if isinstance(found, str) else found[0]
    assert reasons["None"].startswith("whether the batches repeat was not checked")
    assert reasons["3"].startswith("1 of 4 batches read after the first epoch were new ones")
    cache = reasons["4"]
    assert cache.settings == {"cache": True} and "keeping them takes 3 MiB of host memory" in cache.why
    assert "class CachedBatches(keras.utils.PyDataset):" in cache.line  # the code, never a description
    assert cache.line.endswith("model.fit(CachedBatches(dataset), ...)")
    # a generator repeating every 20 batches: replayed after its first period, in its order
    r.main.input_type = "generator"
    r.main.input_repeats = InputRepeats(checked=30, same=30, order="stream", period=20, bytes=2**30)
    replay, = script._cache(r)
    assert replay.settings == {"cache": True, "period": 20} and "def replayed(batches, period):" in replay.line
    r.env.host_memory_bytes = 2**30  # more than half of the host's memory: refused, with both sizes
    assert script._cache(r) == "the batches repeat, but keeping them takes 1.0 GiB, more than half of the host's 1.0 GiB"


def test_every_input_change_is_code():
    """The lines handed over for prefetch and device_batches are the definitions tune injected."""
    gen = baseline(input_type="generator", wait_s=0.6)
    prefetch, = script._prefetch(gen)
    assert prefetch.line.startswith("def read_ahead(batches, depth=8):") and "model.fit(read_ahead(batches)" in prefetch.line
    arrays = baseline(input_type="numpy")
    moved, = script._device_batches(arrays)
    compile(moved.line.replace("...", "epochs=1"), "line", "exec")  # it parses: code, not prose
