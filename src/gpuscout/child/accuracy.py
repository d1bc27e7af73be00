"""Time-to-accuracy, child side: train on a real dataset with Keras' own `fit` until the
validation accuracy reaches the target, or the epoch limit.

As DAWNBench counts it: the clock starts before the first epoch (so it includes compilation) and
includes the per-epoch evaluation that decides when to stop; data loading and preprocessing
happen before it starts. Each epoch after the first is also a timing window of training
throughput (the first holds the compilation).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from gpuscout.core import datasets
from gpuscout.core.spec import RunSpec
from gpuscout.record.child import ChildResult
from gpuscout.workloads.base import Workload

EVAL_BATCH_MIN = 256  # evaluation has no backward pass: a larger batch is as accurate and faster


def prepare(spec: RunSpec, workload: Workload) -> tuple[datasets.Split, np.ndarray, np.ndarray]:
    split = datasets.load(spec.to_accuracy.dataset)
    shape = workload.input_shape(None)
    x_train, x_val = datasets.standardise(datasets.fit_to(split.x_train, shape), datasets.fit_to(split.x_val, shape))
    labels = np.concatenate([split.y_train, split.y_val])
    if labels.min() < 0 or labels.max() >= workload.num_classes:
        raise ValueError(
            f"the dataset's labels run {labels.min()}..{labels.max()}, the model has {workload.num_classes} classes"
        )
    return split, x_train, x_val


def train_to_accuracy(spec: RunSpec, workload: Workload, keras, emit: Callable[[dict], None]) -> ChildResult:
    split, x_train, x_val = prepare(spec, workload)
    y_train, y_val = split.y_train.astype(np.int32), split.y_val.astype(np.int32)
    goal = spec.to_accuracy
    model = workload.build_model(keras, None)
    model.compile(
        optimizer=workload.build_optimizer(keras),
        loss=workload.build_loss(keras),
        metrics=["accuracy"],
        jit_compile=spec.xla,
    )
    rng = np.random.default_rng(spec.seed)
    eval_batch = max(spec.batch_size, EVAL_BATCH_MIN)
    curve, windows = [], []
    reached_at = None
    start = time.monotonic()
    for epoch in range(1, goal.max_epochs + 1):
        x_epoch = datasets.augment(x_train, rng) if split.augment else x_train
        began = time.monotonic()
        history = model.fit(x_epoch, y_train, batch_size=spec.batch_size, epochs=1, shuffle=True, verbose=0)
        trained = time.monotonic()
        val = model.evaluate(x_val, y_val, batch_size=eval_batch, verbose=0, return_dict=True)
        now = time.monotonic()
        point = {
            "epoch": epoch,
            "train_loss": float(history.history["loss"][-1]),
            "train_accuracy": float(history.history["accuracy"][-1]),
            "val_loss": float(val["loss"]),
            "val_accuracy": float(val["accuracy"]),
            "train_s": trained - began,
            "eval_s": now - trained,
            "elapsed_s": now - start,
        }
        curve.append(point)
        if epoch > 1:
            windows.append(
                {
                    "index": len(windows),
                    "start_monotonic_s": began,
                    "end_monotonic_s": trained,
                    "steps": math.ceil(len(x_train) / spec.batch_size),
                    "samples": len(x_train),
                    "input_wait_s": 0.0,
                }
            )
        emit({"event": "epoch", **point, "of": goal.max_epochs, "target": goal.target})
        if point["val_accuracy"] >= goal.target:
            reached_at = point
            break
    if not windows:  # reached in the first epoch: its time (with the compile) is all there is
        first = curve[0]
        windows.append(
            {
                "index": 0,
                "start_monotonic_s": start,
                "end_monotonic_s": start + first["train_s"],
                "steps": math.ceil(len(x_train) / spec.batch_size),
                "samples": len(x_train),
                "input_wait_s": 0.0,
            }
        )
    return ChildResult.model_validate(
        {
            "compile_s": None,
            "warmup_s": None,
            "steps_per_window": math.ceil(len(x_train) / spec.batch_size),
            "windows": windows,
            "loss": curve[-1]["train_loss"],
            "compiled": f"keras Model.fit (jit_compile={spec.xla})",
            "time_to_accuracy": {
                "target": goal.target,
                "reached": reached_at is not None,
                "dataset": goal.dataset,
                "train_samples": int(len(x_train)),
                "val_samples": int(len(x_val)),
                "augmented": split.augment,
                "epochs": len(curve),
                "max_epochs": goal.max_epochs,
                "seconds": reached_at["elapsed_s"] if reached_at else None,
                "train_seconds": sum(p["train_s"] for p in curve),
                "best_val_accuracy": max(p["val_accuracy"] for p in curve),
                "curve": curve,
            },
        }
    )
