"""`tune --patch` (tune/patch.py): each winning change written where the baseline saw the call,
the rest of the file byte for byte; what cannot be located is said; the copy is an overlay."""

import ast
import os

from gpuscout.tune import patch as patches
from gpuscout.tune.script import Change
from tests.records import fit_events, make_watch_record

SCRIPT = '''import os; os.environ.setdefault("KERAS_BACKEND", "jax")
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
'''


def baseline(path, input_type="PyDataset", fit_line=24, backend="jax"):
    events = fit_events(input_type=input_type, backend=backend)
    events[1]["sites"] = {"fit": {"file": str(path), "line": fit_line}, "compile": {"file": str(path), "line": 22},
                          "input": {"file": str(path), "line": 6, "name": "__init__"}}
    return make_watch_record(events=events)


def change(name, knob, **settings):
    return Change(name, knob, settings, "", "")


def test_changes_written_where_the_calls_are(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    made = patches.make([change("cache", "cache", cache=True), change("jit_compile", "jit_compile", jit_compile=True),
                         change("steps_per_execution_8", "steps_per_execution", steps_per_execution=8),
                         change("workers_4_processes", "workers", workers=4, processes=True),
                         change("mixed_precision", "mixed_precision", mixed_precision="mixed_bfloat16")],
                        baseline(script), tmp_path)
    assert made.located == ["cache", "jit_compile", "steps_per_execution_8", "workers_4_processes", "mixed_precision"]
    before, after = made.texts[script.resolve()]
    assert before == SCRIPT and script.read_text() == SCRIPT  # the user's file is never written
    ast.parse(after)
    assert '"mse", jit_compile=True, steps_per_execution=8)' in after  # replaced, and added before `)`
    assert "super().__init__(workers=4, use_multiprocessing=True, max_queue_size=8)" in after  # a trailing comma
    assert "m.fit(CachedBatches(Slow()), epochs=3)" in after
    lines = after.splitlines()
    policy = next(i for i, line in enumerate(lines) if line.startswith("keras.mixed_precision.set_global_policy("
                                                                       "'mixed_bfloat16')"))
    assert lines.index("import numpy as np, keras") < policy < lines.index(next(l for l in lines if l.startswith("m = ")))
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
        "keras.distribution.set_distribution(keras.distribution.DataParallel())")
    assert "m.fit(np.zeros((8, 2)), np.zeros(8), batch_size=8)" in after
    tf_script = SCRIPT.replace("import numpy as np, keras\n", "import numpy as np, keras\nimport tensorflow as tf\n"
                               "for gpu in tf.config.list_physical_devices('GPU'):\n"
                               "    tf.config.experimental.set_memory_growth(gpu, True)\n")
    script.write_text(tf_script)
    made = patches.make([change("data_parallel", "data_parallel", data_parallel=True)],
                        baseline(script, fit_line=27, backend="tensorflow"), tmp_path)
    lines = made.texts[script.resolve()][1].splitlines()
    strategy = lines.index("tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy())")
    assert lines[strategy - 2] == "    tf.config.experimental.set_memory_growth(gpu, True)"
    assert strategy < next(i for i, line in enumerate(lines) if line.startswith("m = "))
    assert "m.fit(Slow(), epochs=3)" in lines


def test_wraps_nest_in_order_and_what_cannot_be_located_is_said(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("m.fit(Slow(), epochs=3)", "m.fit(batches(), steps_per_epoch=5, **extra)"))
    made = patches.make([change("cache", "cache", cache=True, period=5), change("prefetch", "prefetch", prefetch=True),
                         change("batch_size_x2", "batch_size", batch_size=128)],
                        baseline(script, input_type="generator"), tmp_path)
    after = made.texts[script.resolve()][1]
    assert "m.fit(read_ahead(replayed(batches(), period=5)), steps_per_epoch=5, **extra)" in after
    assert made.unlocated == {"batch_size_x2": "the call passes **kwargs: where a keyword lands cannot be read "
                                               "from the source"}
    outside = tmp_path / "sub"
    outside.mkdir()
    elsewhere = patches.make([change("jit_compile", "jit_compile", jit_compile=True)], baseline(script), outside)
    assert "outside the script's folder" in elsewhere.unlocated["jit_compile"] and not elsewhere.texts


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
