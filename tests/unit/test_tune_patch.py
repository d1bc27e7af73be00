"""`tune --patch` (tune/patch.py): each winning change written where the baseline saw the call,
the rest of the file byte for byte; what cannot be located is said; the copy is an overlay."""

import ast
import os

from gpuscout.analysis.repeats import definition
from gpuscout.tune import patch as patches
from gpuscout.tune import source_edits
from gpuscout.tune.change import Change
from tests.records import fit_events, make_watch_record

SCRIPT = """import os; os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np, keras


class Slow(keras.utils.PyDataset):
    def __init__(self):
        super().__init__(workers=2,)

    def __len__(self):
        return 20

    def __getitem__(self, i):
        return np.zeros((4, 2)), np.zeros(4)


def batches():
    while True:
        yield np.zeros((4, 2)), np.zeros(4)


m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
m.compile("adam",
          "mse", jit_compile=False)
m.fit(Slow(), epochs=3)
"""


def baseline(path, input_type="PyDataset", fit_line=24, backend="jax", input_line=6):
    events = fit_events(input_type=input_type, backend=backend)
    events[1]["sites"] = {
        "fit": {"file": str(path), "line": fit_line},
        "compile": {"file": str(path), "line": 22},
        "input": {"file": str(path), "line": input_line, "name": "__init__"},
    }
    return make_watch_record(events=events)


def change(name, knob, **settings):
    return Change(name, knob, settings, "", "")


def test_changes_written_where_the_calls_are(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    made = patches.make(
        [
            change("cache", "cache", cache=True),
            change("jit_compile", "jit_compile", jit_compile=True),
            change("steps_per_execution_8", "steps_per_execution", steps_per_execution=8),
            change("workers_4_threads", "workers", workers=4),
            change("mixed_precision", "mixed_precision", mixed_precision="mixed_bfloat16"),
        ],
        baseline(script),
        tmp_path,
    )
    assert made.located == ["cache", "jit_compile", "steps_per_execution_8", "workers_4_threads", "mixed_precision"]
    before, after = made.texts[script.resolve()]
    assert before == SCRIPT and script.read_text() == SCRIPT  # the user's file is never written
    ast.parse(after)
    assert '"mse", jit_compile=True, steps_per_execution=8)' in after  # replaced, and added before `)`
    assert "super().__init__(workers=4, use_multiprocessing=False, max_queue_size=8)" in after  # a trailing comma
    assert "m.fit(CachedBatches(Slow()), epochs=3)" in after
    lines = after.splitlines()
    policy = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("keras.mixed_precision.set_global_policy('mixed_bfloat16')")
    )
    assert (
        lines.index("import numpy as np, keras")
        < policy
        < lines.index(next(text for text in lines if text.startswith("m = ")))
    )
    assert "class CachedBatches(keras.utils.PyDataset):" in after
    diff = made.diff(tmp_path)
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n")


def test_data_parallel_written_as_injected_on_each_backend(tmp_path):
    """jax: DataParallel after the keras import; TensorFlow: the strategy after the script's own
    device settings (made before them, it would fix the devices and they would fail)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", "m.fit(np.zeros((8, 2)), np.zeros(8), batch_size=4)"))
    spread = [change("data_parallel_batch", "data_parallel", data_parallel=True, batch_size=8)]
    after = patches.make(spread, baseline(script, input_type="numpy"), tmp_path).texts[script.resolve()][1]
    lines = after.splitlines()
    assert lines[lines.index("import numpy as np, keras") + 1].startswith(
        "keras.distribution.set_distribution(keras.distribution.DataParallel())"
    )
    assert "m.fit(np.zeros((8, 2)), np.zeros(8), batch_size=8)" in after
    tf_script = SCRIPT.replace(
        "import numpy as np, keras\n",
        "import numpy as np, keras\nimport tensorflow as tf\n"
        "for gpu in tf.config.list_physical_devices('GPU'):\n"
        "    tf.config.experimental.set_memory_growth(gpu, True)\n",
    )
    script.write_text(tf_script)
    made = patches.make(
        [change("data_parallel", "data_parallel", data_parallel=True)],
        baseline(script, fit_line=27, backend="tensorflow"),
        tmp_path,
    )
    lines = made.texts[script.resolve()][1].splitlines()
    strategy = lines.index("tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy())")
    assert lines[strategy - 2] == "    tf.config.experimental.set_memory_growth(gpu, True)"
    assert strategy < next(i for i, line in enumerate(lines) if line.startswith("m = "))
    assert "m.fit(Slow(), epochs=3)" in lines


def test_wraps_nest_in_order_and_what_cannot_be_located_is_said(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", "m.fit(batches(), steps_per_epoch=5, **extra)"))
    made = patches.make(
        [
            change("cache", "cache", cache=True, period=5),
            change("prefetch", "prefetch", prefetch=True),
            change("batch_size_x2", "batch_size", batch_size=128),
        ],
        baseline(script, input_type="generator"),
        tmp_path,
    )
    after = made.texts[script.resolve()][1]
    # a keyword the call may also forward is set in the mapping it forwards, over the caller's
    assert (
        "m.fit(read_ahead(replayed(batches(), period=5)), steps_per_epoch=5, **{**extra, 'batch_size': 128})" in after
    )
    assert made.unlocated == {}
    outside = tmp_path / "sub"
    outside.mkdir()
    elsewhere = patches.make([change("jit_compile", "jit_compile", jit_compile=True)], baseline(script), outside)
    assert "outside the script's folder" in elsewhere.unlocated["jit_compile"] and not elsewhere.texts


def test_a_helper_the_script_defines_itself_is_not_taken_for_ours(tmp_path):
    """The script has its own read_ahead(source, depth) (benchmarks/user_input/two_input_generator.py
    on an H200: the patch wrapped fit's input in the user's function and wrote no definition):
    ours goes in as gpuscout_read_ahead, and the script's is left as it was; a file patched before
    gets no second copy of ours."""
    script = tmp_path / "train.py"
    own = "def read_ahead(source, depth=8):\n    return source\n\n\n"
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", own + "m.fit(batches(), steps_per_epoch=5)"))
    made = patches.make([change("prefetch", "prefetch", prefetch=True)], baseline(script, fit_line=28), tmp_path)
    after = made.texts[script.resolve()][1]
    assert "m.fit(gpuscout_read_ahead(batches()), steps_per_epoch=5)" in after
    assert "def gpuscout_read_ahead(" in after and own in after and not made.unlocated
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", "m.fit(batches(), steps_per_epoch=5)"))
    first = patches.make([change("prefetch", "prefetch", prefetch=True)], baseline(script), tmp_path)
    script.write_text(first.texts[script.resolve()][1])
    again = source_edits.insert_after_imports(script.read_text(), definition("read_ahead"), False, "read_ahead")
    assert again == []


def test_the_overlay_links_everything_but_the_patched_files(tmp_path):
    root, into = tmp_path / "project", tmp_path / "copy"
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.npy").write_bytes(b"1234")
    (root / "lib").mkdir()
    (root / "lib" / "model.py").write_text("A = 1\n")
    (root / "lib" / "other.py").write_text("B = 1\n")
    made = patches.Patch(texts={(root / "lib" / "model.py"): ("A = 1\n", "A = 2\n")})
    patches.overlay(made, root, into)
    assert (into / "lib" / "model.py").read_text() == "A = 2\n" and not (into / "lib" / "model.py").is_symlink()
    assert (into / "lib" / "other.py").is_symlink() and (into / "data").is_symlink()
    assert os.path.realpath(into / "data" / "x.npy") == str((root / "data" / "x.npy").resolve())
    assert (root / "lib" / "model.py").read_text() == "A = 1\n"


def test_a_larger_batch_is_written_with_its_learning_rate_which_trains(tmp_path):
    """The batch and the scaled, warmed-up learning rate after the compile statement; the written
    file runs (real Keras): the rate ramps from the script's to 2x over 4 steps, then stays."""
    script = tmp_path / "train.py"
    script.write_text(
        SCRIPT.replace('m.compile("adam",', "m.compile(keras.optimizers.SGD(0.01),").replace(
            "m.fit(Slow(), epochs=3)",
            "m.fit(np.zeros((64, 2)), np.zeros((64, 2)), batch_size=4, "
            "epochs=1, verbose=0)\nprint(float(m.optimizer.learning_rate))",
        )
    )
    made = patches.make(
        [change("batch_size_x2", "batch_size", batch_size=8, learning_rate_factor=2.0, warmup_steps=4)],
        baseline(script, input_type="numpy"),
        tmp_path,
    )
    assert made.located == ["batch_size_x2"]
    after = made.texts[script.resolve()][1]
    lines = after.splitlines()
    at = lines.index('          "mse", jit_compile=False)')
    assert lines[at + 1] == ("scaled_learning_rate(m.optimizer, 2, warmup_steps=4)  # the rate for the larger batch")
    assert "batch_size=8, epochs=1" in after and after.index("class WarmedUpRate") < after.index("def scaled_learning")
    script.write_text(after)
    assert abs(float(run_script(script).split()[-1]) - 0.02) < 1e-8  # 8 steps at batch 8: past the warm-up, 2 x 0.01


TF_DATA = """import numpy as np
import keras


def build():
    import tensorflow as tf

    data = tf.data.Dataset.from_tensor_slices(np.zeros((64, 2))).map(lambda v: v * 2)
    return data.interleave(lambda v: tf.data.Dataset.from_tensors(v), cycle_length=2).batch(8)


m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
m.compile("adam", "mse")
m.fit(build(), epochs=3)
"""


def test_tf_data_changes_are_written_where_the_pipeline_was_built(tmp_path):
    """num_parallel_calls in the sequential map and interleave (tf by the name the file imports
    it as, inside a function), and cache() right after the map that repeats."""
    from gpuscout.record.watch import PipelineOp

    script = tmp_path / "train.py"
    script.write_text(TF_DATA)
    record = baseline(script, input_type="tf.data", backend="tensorflow")
    record.main.pipeline = [
        PipelineOp(op="map", file=str(script), line=8, parallel=False, repeats=True),
        PipelineOp(op="interleave", file=str(script), line=9, parallel=False),
        PipelineOp(op="batch", file=str(script), line=9, parallel=False),
    ]
    made = patches.make(
        [
            change("parallel_calls", "workers", parallel_calls=True),
            change("cache", "cache", cache=True, cache_at=f"{script}:8"),
        ],
        record,
        tmp_path,
    )
    assert made.located == ["parallel_calls", "cache"], made.unlocated
    after = made.texts[script.resolve()][1]
    assert ".map(lambda v: v * 2, num_parallel_calls=tf.data.AUTOTUNE).cache()" in after
    assert "cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE).batch(8)" in after
    ast.parse(after)


def test_mixed_precision_is_written_after_the_script_s_own_policy(tmp_path):
    """A script that sets float32 itself (left in debugging settings) would undo a policy set
    after its imports: the line goes after its own call."""
    script = tmp_path / "train.py"
    script.write_text(
        SCRIPT.replace(
            "m = keras.Sequential", "keras.mixed_precision.set_global_policy('float32')\nm = keras.Sequential"
        )
    )
    made = patches.make(
        [change("mixed_precision", "mixed_precision", mixed_precision="mixed_bfloat16")], baseline(script), tmp_path
    )
    lines = made.texts[script.resolve()][1].splitlines()
    at = lines.index("keras.mixed_precision.set_global_policy('float32')")
    assert lines[at + 1].startswith(
        "keras.mixed_precision.set_global_policy('mixed_bfloat16')  # before the model is built"
    )
    # a policy the script sets under a condition: the line after the whole block, where it always runs
    # (H100: written inside `if BY_HAND:`, the patched copy trained in float32 at 0.61 of the injection)
    script.write_text(
        SCRIPT.replace(
            "m = keras.Sequential",
            "if os.environ.get('FAST'):\n"
            "    keras.mixed_precision.set_global_policy('bfloat16')\n"
            "    print('fast')\n"
            "m = keras.Sequential",
        )
    )
    made = patches.make(
        [change("mixed_precision", "mixed_precision", mixed_precision="mixed_bfloat16")], baseline(script), tmp_path
    )
    lines = made.texts[script.resolve()][1].splitlines()
    at = lines.index("    print('fast')")
    assert lines[at + 1].startswith(
        "keras.mixed_precision.set_global_policy('mixed_bfloat16')  # before the model is built"
    )


def test_an_eager_model_is_written_compiled(tmp_path):
    """run_eagerly off in compile, and a debugging line `m.run_eagerly = True` made False."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", "m.run_eagerly = True\nm.fit(Slow(), epochs=3)"))
    made = patches.make(
        [change("jit_compile", "jit_compile", run_eagerly=False, jit_compile=True)], baseline(script), tmp_path
    )
    after = made.texts[script.resolve()][1]
    assert '"mse", jit_compile=True, run_eagerly=False)' in after and "m.run_eagerly = False\n" in after


AUGMENTING = """import numpy as np
import keras


class Images(keras.utils.PyDataset):
    def augment(self, image, strength=1):
        return image[:, ::-1] / 255

    def __getitem__(self, i):
        return np.stack([self.augment(im, strength=2) for im in self.images]), self.labels


def build():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model
"""


def augmenting(path, **function):
    """A baseline whose probe found Images.augment taking the PyDataset's time, told as two layers."""
    events = fit_events(input_type="PyDataset", wait_s=0.8)
    events[1]["sites"] = {"compile": {"file": str(path), "line": 15}}
    events[-1]["sample_work"] = {
        "file": str(path),
        "getitem_s": 0.02,
        "profiled": 3,
        "lines": [{"line": 10, "share": 0.97}],
        "function": {
            "name": "Images.augment",
            "file": str(path),
            "line": 6,
            "call_line": 10,
            "share": 0.95,
            "calls_per_batch": 64.0,
            "owner": "Images.augment",
            "argument": "image",
            "input_shape": [8, 8, 3],
            "input_dtype": "uint8",
            "explained": 48,
            "layers": [{"name": "Rescaling", "args": [1 / 255]}, {"name": "RandomFlip", "args": ["horizontal"]}],
            **function,
        },
    }
    return make_watch_record(events=events)


def test_augmentation_moved_into_the_model_before_its_compile(tmp_path):
    """The planner's change (tune/changes/augment_in_model.py) and its patch: the call replaced by its image, the model
    wrapped behind the layers before the statement that compiles it, at that statement's indentation."""
    from gpuscout.tune.changes import augment_in_model as augment

    script = tmp_path / "train.py"
    script.write_text(AUGMENTING)
    record = augmenting(script)
    [made] = augment.augment_in_model(record)
    assert made.settings["augment_in_model"]["argument"] == "image" and "takes 95% of __getitem__" in made.why
    assert "keras.layers.Rescaling(1 / 255), keras.layers.RandomFlip('horizontal'), model])" in made.line
    patch = patches.make([made], record, tmp_path)
    assert patch.located == ["augment_in_model"], patch.unlocated
    after = patch.texts[script.resolve()][1]
    assert "np.stack([im for im in self.images])" in after
    assert (
        "    model = keras.Sequential([keras.Input(shape=(8, 8, 3)), keras.layers.Rescaling(1 / 255), "
        "keras.layers.RandomFlip('horizontal'), model])  # augment's work, on the device\n"
        "    model.compile("
    ) in after
    ast.parse(after)
    # where the function cannot be told as layers, or the model steps itself, the change is not tried: why
    refused = augment.augment_in_model(augmenting(script, layers=[], why_not="its values change from call to call"))
    assert "Images.augment (train.py:6) takes 95%" in refused and "its values change from call to call" in refused
    events = fit_events(input_type="PyDataset", wait_s=0.8)
    events[-1]["sample_work"] = {
        "file": str(script),
        "getitem_s": 0.02,
        "profiled": 3,
        "lines": [{"line": 10, "share": 0.97}],
    }
    inline = augment.augment_in_model(make_watch_record(events=events))
    assert "its own lines take it (train.py:10 97% of 20.0 ms a call)" in inline
    # gpuscout's own layer (a crop per image that keeps XLA on) goes with its definition
    shifted = augmenting(
        script,
        layers=[
            {"name": "RandomCropEach", "args": [8, 8], "kwargs": {"pad_height": 1, "pad_width": 1, "fill_value": 0.0}}
        ],
    )
    [made] = augment.augment_in_model(shifted)
    after = patches.make([made], shifted, tmp_path).texts[script.resolve()][1]
    assert "RandomCropEach(8, 8, pad_height=1, pad_width=1, fill_value=0.0), model])" in after
    assert after.index("class RandomCropEach(keras.layers.Layer):") < after.index(
        "model = keras.Sequential([keras.Input("
    )
    assert "keras.layers.RandomCropEach" not in after
    ast.parse(after)


INLINE = """import numpy as np
import keras


class Images(keras.utils.PyDataset):
    def __getitem__(self, i):
        idx = self.order[i * 8 : (i + 1) * 8]
        out = np.empty((8, 8, 8, 3), "float32")
        for k, j in enumerate(idx):
            image = self.images[j]
            if np.random.rand() < 0.5:  # a flip of half
                image = image[:, ::-1]
            out[k] = image / 255
        return out, self.labels[idx]


def build():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model
"""


def test_inline_augmentation_handed_as_read_and_the_model_behind_its_layers(tmp_path):
    """augment_inline's plan and patch (tune/changes/augment_inline.py): __getitem__'s buffer and loop
    left out (lines 8 and 9-13, by hand), its return handing self.images[idx], the model behind the
    layers before its compile; a record whose lines are not the file's is refused, not patched."""
    from gpuscout.tune.changes import augment_inline as inline

    script = tmp_path / "train.py"
    script.write_text(INLINE)

    def record(**told):
        events = fit_events(input_type="PyDataset", wait_s=0.8)
        events[1]["sites"] = {"compile": {"file": str(script), "line": 19}}
        events[-1]["sample_work"] = {
            "file": str(script),
            "getitem_s": 0.02,
            "profiled": 3,
            "lines": [{"line": 13, "share": 0.6}, {"line": 10, "share": 0.3}],
            "inline": {
                "file": str(script),
                "line": 6,
                "end_line": 14,
                "images": "self.images",
                "indices": "idx",
                "removed": [[8, 8], [9, 13]],
                "input_shape": [8, 8, 3],
                "input_dtype": "uint8",
                "explained": 48,
                "layers": [{"name": "Rescaling", "args": [1 / 255]}, {"name": "RandomFlip", "args": ["horizontal"]}],
                **told,
            },
        }
        return make_watch_record(events=events)

    baseline = record()
    [made] = inline.augment_inline(baseline)
    assert made.settings["augment_inline"]["images"] == "self.images" and "train.py:13 60%" in made.why
    assert "was the one it read from self.images (uint8) rescaled, flipped or not" in made.why
    assert "__getitem__ returns self.images[idx]: train.py lines 8, 9-13 left out" in made.line
    patch = patches.make([made], baseline, tmp_path)
    assert patch.located == ["augment_inline"], patch.unlocated
    after = patch.texts[script.resolve()][1]
    assert (
        "    def __getitem__(self, i):\n"
        "        idx = self.order[i * 8 : (i + 1) * 8]\n"
        "        return self.images[idx], self.labels[idx]\n"
    ) in after
    assert (
        "    model = keras.Sequential([keras.Input(shape=(8, 8, 3)), keras.layers.Rescaling(1 / 255), "
        "keras.layers.RandomFlip('horizontal'), model])  # __getitem__'s augmentation, on the device\n"
        "    model.compile("
    ) in after
    ast.parse(after)
    moved = patches.make([made], record(removed=[[8, 8]]), tmp_path)
    assert moved.located == [] and "changed since tune read it" in moved.unlocated["augment_inline"]
    refused = inline.augment_inline(record(layers=[], why_not="its values change from call to call"))
    assert "train.py:13 60%" in refused and "cannot be moved as layers: its values change" in refused


ARRAYS = """import keras
import numpy as np

x = np.arange(200, dtype="float32").reshape(200, 1)
y = np.zeros(200, dtype="float32")


class Epochs(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        print("steps", self.steps)


keras.utils.set_random_seed(0)
m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
m.compile("sgd", "mse")
m.fit(x, y, batch_size=48, epochs=2, verbose=0, callbacks=[Epochs()], validation_data=(x[:96], y[:96]))
"""


def run_script(path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_device_batches_are_written_as_fit_s_own_batches_after_the_imports(tmp_path):
    """Issue 74: device batches were counted in the best but "not written by a patch yet". Now the
    patch writes them: the helper after the file's imports (after `import numpy`, which comes after
    `import keras`: nothing defined between two imports, ruff's E402), `import math` for the epoch's
    steps, fit given the slices; the copy trains fit's 5 steps an epoch (200 samples at 48, the last
    partial) and is as clean as the script under ruff."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(ARRAYS)
    fit_line = next(i for i, line in enumerate(ARRAYS.splitlines(), 1) if line.startswith("m.fit("))
    events = fit_events(input_type="numpy")
    events[1]["sites"] = {"fit": {"file": str(script), "line": fit_line}}
    made = patches.make(
        [change("device_batches", "device_batches", device_batches=True)], make_watch_record(events=events), tmp_path
    )
    assert made.located == ["device_batches"], made.unlocated
    after = made.texts[script.resolve()][1]
    # validated at fit's batch of 48 as before (validation_batch_size's default was batch_size)
    assert (
        "m.fit(device_slices(x, y, 48), epochs=2, verbose=0, callbacks=[Epochs()], validation_data=(x[:96], y[:96]), "
        "steps_per_epoch=math.ceil(len(x) / 48), validation_batch_size=48)" in after
    )
    lines = after.splitlines()
    assert (
        lines.index("import numpy as np")
        < lines.index("import math")
        < lines.index("def device_slices(x, y, batch_size, shuffle=True):")
    )
    assert "gpuscout" not in after  # nothing of ours in the user's code
    assert run_script(script).split() == ["steps", "5", "steps", "5"]
    script.write_text(after)
    assert run_script(script).split() == ["steps", "5", "steps", "5"]
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E4,E7,E9,F", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout


def test_device_slices_are_fit_s_batches_reshuffled_each_epoch(tmp_path):
    """fit(x, y, batch_size=48) on 200 samples: 5 batches an epoch, the last of 8; each epoch every
    sample once, in a new order drawn from NumPy's generator as Keras draws it; shuffle="batch"
    within batches; shuffle=False in order."""
    check = tmp_path / "check.py"
    check.write_text(
        """import numpy as np
from gpuscout.child.fixes import device_slices

x = np.arange(200); y = -np.arange(200)
np.random.seed(5)
expected = np.random.RandomState(5).permutation(200)
batches = device_slices(x, y, 48)
epochs = [[next(batches) for _ in range(5)] for _ in range(2)]
for epoch in epochs:
    assert [len(b[0]) for b in epoch] == [48, 48, 48, 48, 8]
    seen = np.concatenate([np.asarray(b[0]) for b in epoch])
    assert sorted(seen) == list(range(200))
    assert all((np.asarray(b[1]) == -np.asarray(b[0])).all() for b in epoch)  # x and y stay paired
first = np.concatenate([np.asarray(b[0]) for b in epochs[0]])
second = np.concatenate([np.asarray(b[0]) for b in epochs[1]])
assert (first == expected).all() and (first != second).any()
ordered = device_slices(x, y, 48, shuffle=False)
assert (np.concatenate([np.asarray(next(ordered)[0]) for _ in range(5)]) == np.arange(200)).all()
within = device_slices(x, y, 48, shuffle="batch")
batch = np.asarray(next(within)[0])
assert sorted(batch) == list(range(48)) and (batch != np.arange(48)).any()
print("ok")
"""
    )
    assert run_script(check).strip() == "ok"


def test_process_workers_written_as_the_class_and_fits_input_wrapped(tmp_path):
    """The patch of process_workers (issue 77): SpawnedWorkers' definition, as measured, after the
    imports, and fit's dataset handed to it; the class compiles on its own."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    spawned = [change("process_workers_6", "process_workers", process_workers=6)]
    after = patches.make(spawned, baseline(script), tmp_path).texts[script.resolve()][1]
    ast.parse(after)
    assert definition("SpawnedWorkers") in after
    assert "m.fit(SpawnedWorkers(Slow(), workers=6), epochs=3)" in after
    assert after.index("import numpy as np, keras") < after.index("class SpawnedWorkers") < after.index("m = ")
    serve = after.split('SERVE = r"""')[1].split('"""')[0]  # the workers' own program, as written
    compile(serve, "SpawnedWorkers.SERVE", "exec")
    assert "Connection(int(sys.argv[1]))" in serve


TF_DATA_AUGMENTING = """import numpy as np
import tensorflow as tf
import keras


def augment(image, label):
    image = tf.image.random_flip_left_right(image)
    return tf.cast(image, tf.float32) / 255.0, label


images = np.zeros((64, 8, 8, 3), "uint8")
ds = tf.data.Dataset.from_tensor_slices((images, np.zeros(64))).shuffle(64).map(
    augment, num_parallel_calls=tf.data.AUTOTUNE
).batch(8)
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
model.compile("adam", "mse")
model.fit(ds, epochs=2)
"""


def test_a_tf_data_maps_augmentation_moved_into_the_model(tmp_path):
    """augment_map's plan and patch (tune/changes/augment_map.py): the random map told as layers is
    taken out of the chain where the script wrote it (its receiver kept, the calls after it too), the
    model put behind the layers before its compile. Not planned, with why: before the probe told it,
    where it cannot be layers, and where fit validates on data made without it and the layers rescale."""
    from gpuscout.tune.changes import augment_map as moving

    script = tmp_path / "train.py"
    script.write_text(TF_DATA_AUGMENTING)
    layers = [{"name": "Rescaling", "args": [1 / 255]}, {"name": "RandomFlip", "args": ["horizontal"]}]

    def record(augment=None, validation=False, validation_maps=()):
        events = fit_events(input_type="tf.data", wait_s=0.8, backend="tensorflow")
        events[1]["sites"] = {"compile": {"file": str(script), "line": 16}}
        began = {"event": "watch_fit_begin", "pid": 100, "fit": 1, "began_monotonic_s": 999.0}
        events.insert(1, {**began, "validation": validation, "validation_maps": list(validation_maps)})
        ops = [
            {"op": "shuffle", "file": str(script), "line": 12},
            {"op": "map", "file": str(script), "line": 12, "parallel": True, "repeats": False, "augment": augment},
            {"op": "batch", "file": str(script), "line": 12, "parallel": False},
        ]
        events.append({"event": "watch_pipeline", "pid": 100, "fit": 1, "ops": ops})
        return make_watch_record(events=events)

    told = {"function": "augment", "input_shape": [8, 8, 3], "input_dtype": "uint8", "explained": 48}
    baseline = record({**told, "layers": layers})
    assert baseline.main.validation is False and baseline.main.pipeline[1].augment.function == "augment"
    [made] = moving.augment_map(baseline)
    assert made.settings["augment_map"] == {
        "at": f"{script}:12",
        "function": "augment",
        "input_shape": [8, 8, 3],
        "layers": [
            {"name": "Rescaling", "args": [1 / 255], "kwargs": {}},
            {"name": "RandomFlip", "args": ["horizontal"], "kwargs": {}},
        ],
    }
    assert "the map at train.py:12 (augment) runs on the host" in made.why
    assert "was the one it was given (uint8) rescaled, flipped or not" in made.why
    patch = patches.make([made], baseline, tmp_path)
    assert patch.located == ["augment_map"], patch.unlocated
    after = patch.texts[script.resolve()][1]
    assert "ds = tf.data.Dataset.from_tensor_slices((images, np.zeros(64))).shuffle(64).batch(8)\n" in after
    assert (
        "model = keras.Sequential([keras.Input(shape=(8, 8, 3)), keras.layers.Rescaling(1 / 255), "
        "keras.layers.RandomFlip('horizontal'), model])  # the map's augmentation, on the device\n"
        "model.compile("
    ) in after
    ast.parse(after)
    # not planned, each with why
    assert "is told when tune runs the script" in moving.augment_map(record(None))
    refused = moving.augment_map(record({**told, "why_not": "its values change from call to call"}))
    assert refused == "the map at train.py:12 (augment) cannot be moved as layers: its values change from call to call"
    apart = moving.augment_map(record({**told, "layers": layers}, validation=True, validation_maps=["train.py:20"]))
    assert apart.startswith("fit validates on data made without the map at train.py:12 (its own: train.py:20)")
    assert "the model behind Rescaling would change it too" in apart
    # validated through the same map: left out of both, the same model reads both
    [same] = moving.augment_map(record({**told, "layers": layers}, validation=True, validation_maps=[f"{script}:12"]))
    assert same.knob == "augment_map"
    # a flip alone is training-only: validation data made apart is read as before
    flip = [layers[1]]
    [flipped] = moving.augment_map(record({**told, "layers": flip}, validation=True, validation_maps=["train.py:20"]))
    assert flipped.settings["augment_map"]["layers"][0]["name"] == "RandomFlip"


def test_workers_reach_the_idiomatic_pydataset_through_the_kwargs_it_forwards(tmp_path):
    """Issue 86, item 3: `def __init__(self, batch_size=128, **kwargs): super().__init__(**kwargs)`,
    as Keras' guides and examples/watch_me.py write a PyDataset, got no patch. The keywords are set
    in the mapping the call forwards, and the patched class runs: its batches made by 2 threads,
    whether its caller passes workers too or not."""
    from tests.conftest import ROOT

    script = tmp_path / "watch_me.py"
    script.write_text((ROOT / "examples" / "watch_me.py").read_text())
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "def __init__" in text)
    where = baseline(script, input_line=line)
    made = patches.make([change("workers_2_threads", "workers", workers=2)], where, tmp_path)
    assert made.located == ["workers_2_threads"] and not made.unlocated, made.unlocated
    after = made.texts[script.resolve()][1]
    assert "super().__init__(**{**kwargs, 'workers': 2, 'use_multiprocessing': False, 'max_queue_size': 4})" in after, (
        after
    )
    assert after.splitlines()[line - 1].strip() == "def __init__(self, batch_size=128, **kwargs):"
    namespace: dict = {}
    exec(compile(after[: after.index("model = keras.Sequential")], str(script), "exec"), namespace)
    for made_by in (namespace["Batches"](), namespace["Batches"](workers=1, max_queue_size=1)):
        assert (made_by.workers, made_by.use_multiprocessing, made_by.max_queue_size) == (2, False, 4)
        images, labels = made_by[0]
        assert images.shape == (128, 32, 32, 1) and labels.shape == (128,)
