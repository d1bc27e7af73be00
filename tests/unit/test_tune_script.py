"""`tune -- COMMAND`'s decisions (tune/script.py) on synthetic watch records: which changes a
baseline makes worth trying and why the others are not, the loss check at equal steps, the noisy
baseline, and the contrast of windows by hand."""

import math

import pytest

from gpuscout.analysis.compare import contrast
from gpuscout.record.watch import InputRepeats
from gpuscout.tune import judging, script
from gpuscout.tune.changes import cache as cache_change
from gpuscout.tune.changes import device_batches as device_change
from gpuscout.tune.changes import larger_batch
from gpuscout.tune.changes import prefetch as prefetch_change
from gpuscout.tune.changes import workers as workers_change
from tests.records import fit_events, make_watch_record
from tests.watch_records import H100, busy


def baseline(**kw):
    gpu = kw.pop("gpu", True)
    events = fit_events(**{"wait_s": 0.0, **kw})
    return make_watch_record(events=events, gpus=[H100] if gpu else [], samples=[busy(95)] if gpu else [])


def test_a_jax_script_without_jit_on_arrays_on_a_gpu():
    planned = script.plan(baseline(jit_compile=False, input_type="numpy", peak_memory_bytes=2**30))
    names = [c.name for c in planned.changes]
    # 1 GiB at batch 64 of an H100's 80: 72 batches' worth, so as far as x64 in one round
    assert names == [
        "jit_compile",
        "mixed_precision",
        "device_batches",
        "batch_size_x4",
        "batch_size_x16",
        "batch_size_x64",
    ]
    mixed = next(c for c in planned.changes if c.knob == "mixed_precision")
    assert mixed.settings == {"mixed_precision": "mixed_bfloat16"}  # compute capability 9.0
    skipped = {s.knob: s.reason for s in planned.skipped}
    assert skipped["steps_per_execution"].startswith("the step runs op by op")
    assert skipped["workers"] == "the input is numpy, not a PyDataset"


def test_a_tensorflow_pydataset_that_waits_on_a_cpu():
    r = baseline(backend="tensorflow", input_type="PyDataset", jit_compile=False, wait_s=0.6, gpu=False)
    planned = script.plan(r)
    # a batch waits 0.6 s / 50 = 12 ms against 20 - 12 = 8 ms of the rest of a step: ceil(12 / 8) + 1 = 3 workers
    # threads, and processes of new interpreters (never Keras' forked ones: process_workers)
    # and, after the input's fixes, fewer host calls: part of the 12 ms wait is each step's hand-over, and
    # the step's own 8 ms is short (issue 86: 1.8x on an H100 for a generator waiting 56% of the time)
    assert [c.name for c in planned.changes] == [
        "workers_3_threads",
        "process_workers_3",
        "steps_per_execution_6",
        "steps_per_execution_30",
    ]
    assert "steps of 8.0 ms; the loop waits for input 60% of the time" in planned.changes[2].why
    spawned = next(c for c in planned.changes if c.knob == "process_workers")
    assert spawned.settings == {"process_workers": 3} and "SpawnedWorkers(dataset, workers=3)" in spawned.line
    skipped = {s.knob: s.reason for s in planned.skipped}
    assert "Keras turns XLA off on a CPU-only TensorFlow" in skipped["jit_compile"]
    assert skipped["mixed_precision"] == "no GPU: mixed precision buys nothing on a CPU"
    assert script.plan(r, only=("workers",), skip=()).skipped == []
    assert [c.name for c in script.plan(r, only=("process_workers",)).changes] == ["process_workers_3"]
    assert [s.reason for s in script.plan(r, skip=("workers",)).skipped if s.knob == "workers"] == ["--skip"]


def test_loss_at_equal_steps_and_a_noisy_baseline():
    base = baseline()
    worse = baseline()
    base.main.last_loss, worse.main.last_loss = 0.5, 0.9
    assert "0.9 after 151 steps against the baseline's 0.5" in judging.health(worse, base)
    worse.main.last_loss = 0.7  # 1.4x: not clearly worse
    assert judging.health(worse, base) is None
    worse.main.last_loss = math.nan
    assert judging.health(worse, base).startswith("the loss is nan")
    again = baseline(window_s=0.5)  # the same steps in half the time: 2x, and the intervals apart
    assert "apart" in judging.noisy(base, again)
    assert judging.noisy(base, baseline()) is None


def test_contrast_by_hand():
    c = contrast([2.0, 2.1, 1.9, 2.05], [1.0, 1.05, 0.95, 1.02])
    assert c.ratio == pytest.approx(2.025 / 1.01) and c.verdict == "faster" and c.test == "mann-whitney"
    assert c.p_value == pytest.approx(2 / math.comb(8, 4))  # every change window above every baseline one
    tie = contrast([1.0, 1.0], [1.0, 1.0])
    assert tie.ratio == 1.0 and tie.verdict == "no significant difference"
    # the rank test rejects (8 windows a side: U = 52.5 of 64, p = 0.035 with its ties) while the bootstrap
    # interval of the medians' ratio holds 1.0: no verdict that its own interval contradicts
    mine = [102.1, 97.9, 102.1, 101.8, 104.7, 99.3, 100.1, 103.0]
    theirs = [97.4, 100.2, 101.3, 99.3, 97.4, 101.9, 94.7, 96.9]
    split = contrast(mine, theirs)
    assert split.p_value < 0.05 and split.ratio_low < 1.0 < split.ratio_high
    assert split.verdict == "no significant difference"


def test_unknown_change_names_are_refused():
    with pytest.raises(Exception, match="unknown change 'xla': choose from jit_compile"):
        script.check_names(("xla",), "--only")


def test_cache_is_offered_only_for_batches_seen_to_repeat():
    r = baseline(backend="tensorflow", input_type="PyDataset", wait_s=0.6, gpu=False)
    reasons = {}
    for repeats in (
        None,
        {"checked": 4, "same": 3, "batches": 22},
        {"checked": 4, "same": 4, "batches": 20, "bytes": 3 * 2**20},
    ):
        r.main.input_repeats = repeats and InputRepeats(**repeats)
        found = cache_change.cache(r)
        reasons[str(repeats and repeats["same"])] = found if isinstance(found, str) else found[0]
    assert reasons["None"].startswith("whether the batches repeat was not checked")
    assert reasons["3"].startswith("1 of 4 batches read after the first epoch were new ones")
    cache = reasons["4"]
    assert (
        cache.settings == {"cache": True, "fill_steps": 20} and "keeping them takes 3 MiB of host memory" in cache.why
    )
    assert "class CachedBatches(keras.utils.PyDataset):" in cache.line  # the code, never a description
    assert cache.line.endswith("model.fit(CachedBatches(dataset), ...)")
    # a generator repeating every 20 batches: replayed after its first period, in its order
    r.main.input_type = "generator"
    r.main.input_repeats = InputRepeats(checked=30, same=30, order="stream", period=20, bytes=2**30)
    (replay,) = cache_change.cache(r)
    assert (
        replay.settings == {"cache": True, "period": 20, "fill_steps": 20}
        and "def replayed(batches, period):" in replay.line
    )
    r.env.host_memory_bytes = 2**30  # more than half of the host's memory: refused, with both sizes
    assert (
        cache_change.cache(r)
        == "the batches repeat, but keeping them takes 1.0 GiB, more than half of the host's 1.0 GiB"
    )


def test_every_input_change_is_code():
    """The lines handed over for prefetch and device_batches are the definitions tune injected."""
    gen = baseline(input_type="generator", wait_s=0.6)
    (prefetch,) = prefetch_change.prefetch(gen)
    assert (
        prefetch.line.startswith("def read_ahead(batches, depth=8):")
        and "model.fit(read_ahead(batches)" in prefetch.line
    )
    arrays = baseline(input_type="numpy")
    (moved,) = device_change.device_batches(arrays)
    compile(moved.line.replace("...", "epochs=1"), "line", "exec")  # it parses: code, not prose


def test_a_larger_batch_goes_as_far_as_memory_and_the_epoch_allow_with_its_learning_rate():
    assert [larger_batch.batch_factors(m) for m in (1, 2, 4, 8, 32, 64, 4096)] == [
        [],
        [2],
        [4],
        [4, 8],
        [4, 16, 32],
        [4, 16, 64],
        [4, 16, 64],
    ]
    r = baseline(input_type="numpy", peak_memory_bytes=10 * 2**30)  # 0.9 x 80 GiB / 10 GiB = 7.2: x4 at most
    assert [c.name for c in larger_batch.larger_batches(r)] == ["batch_size_x4"]
    r.main.peak_memory_bytes = 2**30
    r.main.steps_per_epoch = 100  # 6,400 samples an epoch at batch 64: 16 steps an epoch at 400, x4 at most
    r.main.optimizer = "AdamW"
    [x4] = larger_batch.larger_batches(r)
    # AdamW: the square root of 4; warmed up over one epoch of the new batch, 6,400 / 256 = 25 steps
    assert x4.settings == {"batch_size": 256, "learning_rate_factor": 2.0, "warmup_steps": 25}
    assert "learning rate x2 (x the square root of the batch's factor for AdamW" in x4.line
    r.main.optimizer = "LossScaleOptimizer(SGD)"
    [x4] = larger_batch.larger_batches(r)
    assert x4.settings["learning_rate_factor"] == 4.0 and "linear scaling rule" in x4.line
    # a setting at batch 256 already (the script's 64): named by its factor over the script's batch
    r.main.batch_size, r.main.steps_per_epoch = 256, 10_000
    assert [c.name for c in larger_batch.larger_batches(r, script_batch=64)][:2] == ["batch_size_x16", "batch_size_x64"]
    r.main.steps_per_epoch = 20  # 5,120 samples: not even 16 steps at 512
    assert "fewer than 16 steps an epoch" in larger_batch.larger_batches(r, script_batch=64)


def test_a_larger_batch_s_loss_is_read_where_it_had_seen_the_baseline_s_samples():
    base = baseline(windows=8, steps=10, batch=64)  # 81 steps, 5,184 samples
    big = baseline(windows=8, steps=10, batch=256)  # 4x the samples at every step
    base.main.last_loss, big.main.last_loss = 0.5, 0.4
    for i, w in enumerate(big.main.windows):
        w.loss = 3.0 - 0.1 * i
    # windows end at 256 + 2,560 k samples: the first at or past 5,184 is the second (5,376)
    loss, against, where = judging.loss_point(big, base)
    assert (loss, against) == (2.9, 0.5) and where.startswith("after 5,376 samples (the baseline's run: 5,184)")
    assert "the loss is 2.9 after 5,376 samples" in judging.health(big, base)
    for w in big.main.windows:
        w.loss = 0.45
    assert judging.health(big, base) is None
    same = baseline(windows=8, steps=10, batch=64)
    same.main.last_loss = 0.6
    assert judging.loss_point(same, base) == (0.6, 0.5, "after 81 steps")


def test_a_gpu_idle_most_of_the_time_gets_more_work_per_call_first():
    """A compiled step at a small batch with the GPU 20% busy and no input wait: the larger batches
    and fewer host calls lead the round (a budget may end it); at 95% busy the order is the plan's."""

    idle = make_watch_record(
        events=fit_events(wait_s=0.0, input_type="numpy", window_s=0.1, peak_memory_bytes=2**30),
        gpus=[H100],
        samples=[busy(20)],
    )
    assert [c.knob for c in script.plan(idle).changes][:4] == ["batch_size"] * 3 + ["steps_per_execution"]
    full = baseline(input_type="numpy", peak_memory_bytes=2**30)
    assert script.plan(full).changes[0].knob == "mixed_precision"


def _op(op, line, **kw):
    return {"op": op, "file": "/w/train.py", "line": line, **kw}


def test_a_tf_data_pipeline_gets_its_maps_parallel_and_a_cache_after_its_last_repeating_map():
    """Issue 60, item 6: the script's own calls that built the pipeline (child/tf_data.py) make the
    tf.data changes: num_parallel_calls where a map was left sequential, and a cache() after the
    last map whose elements were made the same twice, with no shuffle before it, and a size."""
    from gpuscout.record.watch import PipelineOp

    r = baseline(backend="tensorflow", input_type="tf.data", wait_s=0.6, gpu=False)
    r.main.pipeline = [
        PipelineOp(**o)
        for o in (
            _op("map", 10, parallel=False, repeats=True, elements=1000, element_bytes=3072),
            _op("map", 11, parallel=True, repeats=False, elements=1000, element_bytes=3072),  # a random augmentation
            _op("batch", 12, parallel=False),
            _op("prefetch", 13),
        )
    ]
    planned = {c.knob: c for c in script.plan(r, only=("workers", "cache")).changes}
    assert planned["workers"].settings == {"parallel_calls": True} and "map at line 10" in planned["workers"].line
    assert planned["cache"].settings == {"cache": True, "cache_at": "/w/train.py:10", "fill_steps": 150}
    assert (
        "the map at train.py:10 made its first elements the same in two passes, 1,000 elements" in planned["cache"].why
    )
    r.main.pipeline.insert(0, PipelineOp(**_op("shuffle", 9)))  # the order would be frozen
    assert "comes after a shuffle" in cache_change.cache(r)
    r.main.pipeline = [PipelineOp(**_op("map", 11, repeats=False, elements=9))]  # a random augmentation
    assert "the map at train.py:11 made different elements in two passes" in cache_change.cache(r)
    r.main.pipeline = [PipelineOp(**_op("map", 10, parallel=True, repeats=True, endless=True))]
    assert "makes endless elements" in cache_change.cache(r)
    assert workers_change.workers(r).startswith("every map and interleave of the pipeline runs in parallel already")
    r.main.pipeline = []
    assert "were not seen" in cache_change.cache(r)


def test_a_model_left_to_run_eagerly_is_compiled_first():
    """Keras' debugging mode (run_eagerly=True) compiles nothing: the pace change turns it off, with
    XLA where Keras would use it (jax, or TensorFlow on a GPU) and as TensorFlow's graph elsewhere."""
    jax_eager = baseline(input_type="numpy", peak_memory_bytes=2**30)
    jax_eager.main.run_eagerly = True
    [first] = [c for c in script.plan(jax_eager).changes if c.knob == "jit_compile"]
    assert first.settings == {"run_eagerly": False, "jit_compile": True} and first.name == "jit_compile"
    tf_cpu = baseline(backend="tensorflow", input_type="numpy", gpu=False)
    tf_cpu.main.run_eagerly = True
    [graph] = [c for c in script.plan(tf_cpu).changes if c.knob == "jit_compile"]
    assert graph.name == "run_eagerly_false" and graph.settings == {"run_eagerly": False}
    assert "model.compile(..., run_eagerly=False)" in graph.line


def test_beside_a_callback_that_sets_the_rate_it_is_scaled_once_and_stays_a_number():
    """A ReduceLROnPlateau sets the rate as a number each epoch: a schedule in its place stops the
    training (TypeError), so the rate is multiplied once, without a warm-up, and the line says so."""
    import keras

    from gpuscout.child.fixes import scaled_learning_rate

    r = baseline(input_type="numpy", peak_memory_bytes=2**30)
    r.main.optimizer, r.main.rate_callback = "SGD", "ReduceLROnPlateau"
    [x4, *_] = larger_batch.larger_batches(r)
    assert x4.settings["warmup_steps"] == 0 and "no warm-up beside the script's ReduceLROnPlateau" in x4.line
    plain = keras.optimizers.SGD(0.01)
    scaled_learning_rate(plain, 4.0, 0)
    assert abs(float(plain.learning_rate) - 0.04) < 1e-9
    plain.learning_rate = 0.001  # what the callback does
    warmed = keras.optimizers.SGD(0.01)
    scaled_learning_rate(warmed, 4.0, 10)
    with pytest.raises(TypeError):
        warmed.learning_rate = 0.001


def test_mixed_precision_waits_for_a_setting_that_fixes_the_input():
    """A loop waiting 94% of the time for its input: bf16 could make the other 6% twice as fast,
    1 / (1 - 0.06 x 0.5) = 1.03x at most, not worth a run alone (0.77x measured on an H100); at 50%
    it could buy 1.33x and is tried."""
    starved = baseline(input_type="PyDataset", wait_s=0.94)
    planned = script.plan(starved)
    reason = next(s.reason for s in planned.skipped if s.knob == "mixed_precision")
    assert reason.startswith("the loop waits for input 94% of the time: faster arithmetic could buy at most 1.03x")
    # deferred, not dropped: measured with an input change (tune/search.py)
    assert [c.settings for c in planned.deferred] == [{"mixed_precision": "mixed_bfloat16"}]
    half = baseline(input_type="PyDataset", wait_s=0.5)
    assert "mixed_precision" in [c.knob for c in script.plan(half).changes]
