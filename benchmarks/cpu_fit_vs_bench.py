"""A user's own `model.fit` against `gpuscout bench --model` on the same CPU, in one call (issue
19, item 6: on the CPU gpuscout's default must never lose to what the user's fit does).

    python benchmarks/cpu_fit_vs_bench.py --out OUTDIR [--backends tensorflow,jax]

Two models in the shape of keras-io's examples: the text classifier (Embedding, two Conv1D over
a sequence, a sigmoid output; `Input(shape=(None,))` as keras-io writes it) and mnist_convnet
(two Conv2D, max-pooling, dropout, softmax). For each backend, in turn: the model trained by
Keras' `fit` in a fresh process, as the user's script would (batch 32, Keras' defaults, on data
already in memory, timed over the epochs after the first), `gpuscout bench --model` with its
defaults on that CPU, and on tensorflow `bench --xla` too (the default before issue 19). Prints
samples/s of each and bench / fit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

MODELS = """
import keras


def text_classifier():
    inputs = keras.Input(shape=(None,), dtype="int64")
    x = keras.layers.Embedding(20000, 128)(inputs)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs, outputs)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model, {"shape": (500,), "dtype": "int32", "vocab_size": 20000, "batch_size": 32}


def mnist_convnet():
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model, {"shape": (28, 28, 1), "num_classes": 10, "batch_size": 32}
"""

FIT = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import models
import keras

name = sys.argv[2]
model, spec = getattr(models, name)()
rng = np.random.default_rng(0)
n = 32 * 40
if name == "text_classifier":
    x = rng.integers(0, 20000, size=(n, 500)).astype("int64")
    y = rng.integers(0, 2, size=(n, 1)).astype("float32")
else:
    x = rng.standard_normal((n, 28, 28, 1)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 10, size=n), 10)


class Epochs(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        times.append(time.perf_counter() - self.began)


times = []
model.fit(x, y, batch_size=32, epochs=4, verbose=0, callbacks=[Epochs()])
rates = sorted(n / t for t in times[1:])  # the first epoch compiles
print(json.dumps({"samples_per_s": rates[len(rates) // 2], "epochs_s": times}))
"""


def run(cmd: list[str], env: dict, log: Path) -> subprocess.CompletedProcess:
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log.write_text(proc.stdout + "\n--- stderr\n" + proc.stderr[-50_000:])
    print(f"-- {log.stem}: exit {proc.returncode} in {time.monotonic() - began:.0f} s", flush=True)
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--models", default="text_classifier,mnist_convnet")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.py").write_text(textwrap.dedent(MODELS))
    (args.out / "fit.py").write_text(textwrap.dedent(FIT))
    rows = []
    for backend in args.backends.split(","):
        env = dict(
            os.environ,
            KERAS_BACKEND=backend,
            CUDA_VISIBLE_DEVICES="",
            TF_CPP_MIN_LOG_LEVEL="2",
            GPUSCOUT_STORE=str(args.out / "store.sqlite"),
        )
        for name in args.models.split(","):
            fit = run(
                [sys.executable, str(args.out / "fit.py"), str(args.out), name],
                env,
                args.out / f"fit-{backend}-{name}.txt",
            )
            bench = run(
                [
                    sys.executable,
                    "-m",
                    "gpuscout",
                    "bench",
                    "--model",
                    f"{args.out / 'models.py'}:{name}",
                    "--cpu",
                    "--backend",
                    backend,
                    "--json",
                ],
                env,
                args.out / f"bench-{backend}-{name}.txt",
            )
            if backend == "tensorflow":  # the default before: XLA on for tensorflow on a CPU too
                xla = run(
                    [
                        sys.executable,
                        "-m",
                        "gpuscout",
                        "bench",
                        "--model",
                        f"{args.out / 'models.py'}:{name}",
                        "--cpu",
                        "--backend",
                        backend,
                        "--xla",
                        "--json",
                    ],
                    env,
                    args.out / f"bench-{backend}-xla-{name}.txt",
                )
                try:
                    xla_rate = json.loads(xla.stdout)["runs"][0]["throughput"]["median"]
                except (ValueError, IndexError, KeyError, TypeError):
                    xla_rate = None
                rows.append(
                    {
                        "backend": backend,
                        "model": name,
                        "fit_samples_per_s": None,
                        "bench_samples_per_s": xla_rate,
                        "bench_setting": "batch 32, XLA (--xla: the old default)",
                        "ratio": None,
                        "xla_versus_fit": None,
                    }
                )
            try:
                fit_rate = json.loads(fit.stdout.strip().splitlines()[-1])["samples_per_s"]
            except (ValueError, IndexError, KeyError):
                fit_rate = None
            try:
                record = json.loads(bench.stdout)["runs"][0]
                bench_rate = record["throughput"]["median"]
                setting = f"batch {record['batch_size']}, {'XLA' if record['xla'] else 'no XLA'}"
            except (ValueError, IndexError, KeyError, TypeError):
                bench_rate, setting = None, "failed"
            rows.append(
                {
                    "backend": backend,
                    "model": name,
                    "fit_samples_per_s": fit_rate,
                    "bench_samples_per_s": bench_rate,
                    "bench_setting": setting,
                    "ratio": bench_rate / fit_rate if fit_rate and bench_rate else None,
                }
            )
            for row in rows:  # the --xla row against this model's fit
                if row["model"] == name and row["backend"] == backend and row["fit_samples_per_s"] is None:
                    row["ratio"] = (
                        row["bench_samples_per_s"] / fit_rate if fit_rate and row["bench_samples_per_s"] else None
                    )
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2))
    print(f"{'backend':11} {'model':16} {'fit /s':>9} {'bench /s':>9} {'bench/fit':>9}  bench setting")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "—"
        fit_s = f"{r['fit_samples_per_s']:.1f}" if r["fit_samples_per_s"] else "—"
        bench_s = f"{r['bench_samples_per_s']:.1f}" if r["bench_samples_per_s"] else "—"
        print(f"{r['backend']:11} {r['model']:16} {fit_s:>9} {bench_s:>9} {ratio:>9}  {r['bench_setting']}")


if __name__ == "__main__":
    main()
