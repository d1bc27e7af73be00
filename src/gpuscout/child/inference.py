"""Inference, child side (Task.infer): latency and throughput per batch size in one deployment
format, a closed-loop load test, and the format's outputs against the fp32 Keras model.

Per batch size: `warmup_requests` requests discarded (the first one compiles, its time is kept
as compile_s), then `requests` timed requests, one after another, each synchronised (the
server returns host outputs). The timed requests are cut into WINDOWS consecutive windows so
that throughput carries the same statistics as training runs (median, bootstrap CI).

Load test (`concurrency` K > 0): K client threads in this process send requests of the
smallest batch size back to back for `load_seconds`; each request's latency and the total
throughput are kept. Servers that are not thread-safe (a LiteRT interpreter) are shared behind
a lock, as one interpreter would be.

Accuracy: with a labelled `dataset`, a fp32 Keras model is first trained on it for
TRAIN_EPOCHS epochs, and the served model (exported, converted or cast from it) is evaluated
on the same validation samples; without one, its outputs on PROBE_SAMPLES random inputs are
compared with the fp32 model's (largest and mean absolute difference, top-1 agreement).
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gpuscout.child import data
from gpuscout.child.formats import server_for
from gpuscout.core import datasets
from gpuscout.core.spec import RunSpec, ServeFormat
from gpuscout.record.child import ChildResult
from gpuscout.workloads.base import Workload

WINDOWS = 5
PROBE_SAMPLES = 256
TRAIN_EPOCHS = 5


def _inputs(spec: RunSpec, workload: Workload, keras, model) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """(probe inputs, their labels or None, what training on the dataset reached)."""
    if spec.inference.dataset is None:
        pool = max(PROBE_SAMPLES, max(spec.inference.batch_sizes))
        x, _ = data.sample_batch(workload, np.random.default_rng(spec.seed), pool, spec.seq_len, host_images=False)
        return x, None, {}
    split = datasets.load(spec.inference.dataset)
    shape = workload.input_shape(None)
    x_train, x_val = datasets.standardise(datasets.fit_to(split.x_train, shape), datasets.fit_to(split.x_val, shape))
    model.compile(optimizer=workload.build_optimizer(keras), loss=workload.build_loss(keras), metrics=["accuracy"])
    model.fit(x_train, split.y_train.astype(np.int32), batch_size=64, epochs=TRAIN_EPOCHS, shuffle=True, verbose=0)
    return (
        x_val,
        split.y_val.astype(np.int64),
        {
            "dataset": spec.inference.dataset,
            "train_samples": int(len(x_train)),
            "val_samples": int(len(x_val)),
            "epochs": TRAIN_EPOCHS,
        },
    )


def _batched(predict: Callable, x: np.ndarray, batch: int) -> np.ndarray:
    outs = []
    for start in range(0, len(x), batch):
        part = x[start : start + batch]
        if len(part) < batch:  # a fixed-batch server: pad the last part, keep its real rows
            pad = np.concatenate([part, x[: batch - len(part)]])
            outs.append(predict(pad, fetch=True)[: len(part)])
        else:
            outs.append(predict(part, fetch=True))
    return np.concatenate(outs)


def _agreement(outputs: np.ndarray, reference: np.ndarray, labels: np.ndarray | None) -> dict:
    out, ref = outputs.astype(np.float64), reference.astype(np.float64)
    result = {
        "samples": int(len(out)),
        "max_abs_diff": float(np.max(np.abs(out - ref))),
        "mean_abs_diff": float(np.mean(np.abs(out - ref))),
        "top1_agreement": float(np.mean(out.argmax(-1) == ref.argmax(-1))),
        "accuracy": None,
        "reference_accuracy": None,
    }
    if labels is not None:
        result["accuracy"] = float(np.mean(out.argmax(-1) == labels))
        result["reference_accuracy"] = float(np.mean(ref.argmax(-1) == labels))
    return result


def _timed(predict: Callable, x: np.ndarray, count: int) -> list[tuple[float, float]]:
    spans = []
    for _ in range(count):
        start = time.monotonic()
        predict(x)
        spans.append((start, time.monotonic()))
    return spans


def _load_test(predict: Callable, x: np.ndarray, clients: int, seconds: float, thread_safe: bool) -> dict:
    lock = threading.Lock()
    spans: list[list[tuple[float, float]]] = [[] for _ in range(clients)]
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        while time.monotonic() < deadline:
            start = time.monotonic()
            if thread_safe:
                predict(x)
            else:
                with lock:
                    predict(x)
            spans[i].append((start, time.monotonic()))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = time.monotonic()
    latencies = [end - start for s in spans for start, end in s]
    return {
        "clients": clients,
        "batch_size": int(len(x)),
        "seconds": ended - began,
        "requests": len(latencies),
        "latencies_s": latencies,
        "samples_per_s": len(latencies) * len(x) / (ended - began),
        "thread_safe": thread_safe,
    }


def run_inference(spec: RunSpec, workload: Workload, keras, emit: Callable[[dict], None]) -> ChildResult:
    inf = spec.inference
    keras.mixed_precision.set_global_policy("float32")  # the reference every format is held against
    reference_model = workload.build_model(keras, spec.seq_len)
    x_probe, labels, trained = _inputs(spec, workload, keras, reference_model)
    served_model = reference_model
    if inf.format is ServeFormat.keras and spec.precision.keras_policy != "float32":
        keras.mixed_precision.set_global_policy(spec.precision.keras_policy)
        served_model = workload.build_model(keras, spec.seq_len)
        served_model.set_weights(reference_model.get_weights())
    reference = reference_model.predict(x_probe, batch_size=min(len(x_probe), 256), verbose=0)
    with tempfile.TemporaryDirectory(prefix="gpuscout-infer-") as tmp:
        server = server_for(spec, served_model, keras, Path(tmp), x_probe)
        emit({"event": "prepared", "prepare_s": server.prepare_s, "describe": server.describe})
        thread_safe = inf.format is not ServeFormat.litert
        points = []
        for index, batch in enumerate(inf.batch_sizes):
            x = np.resize(x_probe, (batch, *x_probe.shape[1:])).astype(x_probe.dtype)  # repeats the pool as needed
            input_path = server.choose_input_path(x) if server.choose_input_path else None
            start = time.monotonic()
            server.predict(x)
            first_s = time.monotonic() - start
            _timed(server.predict, x, inf.warmup_requests - 1)
            spans = _timed(server.predict, x, inf.requests)
            per = math.ceil(len(spans) / WINDOWS)
            windows = [
                {
                    "index": i,
                    "start_monotonic_s": chunk[0][0],
                    "end_monotonic_s": chunk[-1][1],
                    "steps": len(chunk),
                    "samples": len(chunk) * batch,
                    "input_wait_s": 0.0,
                }
                for i, chunk in enumerate(spans[j : j + per] for j in range(0, len(spans), per))
            ]
            points.append(
                {
                    "batch_size": batch,
                    "first_request_s": first_s,
                    "input_path": input_path,
                    "latencies_s": [end - begin for begin, end in spans],
                    "windows": windows,
                }
            )
            emit(
                {
                    "event": "window",
                    "index": index,
                    "of": len(inf.batch_sizes),
                    "throughput": batch * len(spans) / (spans[-1][1] - spans[0][0]),
                }
            )
        load = None
        if inf.concurrency:
            x = np.resize(x_probe, (min(inf.batch_sizes), *x_probe.shape[1:])).astype(x_probe.dtype)
            load = _load_test(server.predict, x, inf.concurrency, inf.load_seconds, thread_safe)
        check_batch = min(max(inf.batch_sizes), 256)
        outputs = _batched(server.predict, x_probe[: max(check_batch, min(len(x_probe), 1024))], check_batch)
        agreement = _agreement(outputs, reference[: len(outputs)], None if labels is None else labels[: len(outputs)])
    return ChildResult.model_validate(
        {
            "compiled": server.describe,
            "inference": {
                "points": points,
                "load": load,
                "agreement": agreement,
                "trained": trained or None,
                "server": {
                    "describe": server.describe,
                    "device": server.device,
                    "prepare_s": server.prepare_s,
                    "artifact_bytes": server.artifact_bytes,
                    "format": inf.format.value,
                    "variant": inf.variant,
                },
            },
        }
    )
