"""What to change, ranked by the gain measured, with the code to paste."""

from __future__ import annotations

from gpuscout.core.spec import Backend
from gpuscout.tune.workload_results import Recommendation, Speedup, WorkloadTuneReport

SNIPPETS = {
    "mixed_bfloat16": "keras.mixed_precision.set_global_policy('mixed_bfloat16')",
    "mixed_float16": "keras.mixed_precision.set_global_policy('mixed_float16')  # Keras adds loss scaling in fit",
    "xla": "model.compile(optimizer, loss, jit_compile=True)",
    "pipeline": (
        "dataset = (tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(n)\n"
        "           .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
        "           .batch(batch_size).prefetch(tf.data.AUTOTUNE))"
    ),
    "memory_growth": (
        "for gpu in tf.config.list_physical_devices('GPU'):\n    tf.config.experimental.set_memory_growth(gpu, True)"
    ),
}


def recommendations(report: WorkloadTuneReport, backend: Backend, on_gpu: bool = True) -> list[Recommendation]:
    out = []
    for row in report.ablation.rows if report.ablation else []:
        gain = row.speedup
        if not gain or gain.ratio <= 1.0 or row.factor in (None, "combined"):
            continue
        if row.factor == "input" and row.data == "synthetic":
            continue  # a ceiling, not something to paste
        if row.loss and row.loss.changed:
            continue
        key = row.precision if row.factor == "precision" else ("xla" if row.factor == "xla" else "pipeline")
        cost = {
            "mixed_float16": "fp16 needs loss scaling (Keras' fit does it; a custom loop must use LossScaleOptimizer)",
            "mixed_bfloat16": "needs bf16 tensor cores (Ampere or newer); keep the last layer's output in float32",
            "xla": "a compile at the first step and at every new input shape",
            "pipeline": "more host threads and memory for the cache",
        }[key]
        out.append(Recommendation(title=row.label, gain=gain, code=SNIPPETS[key], cost=cost))
    batch = report.batch
    curve = {c.batch_size: c for c in batch.curve if c.samples_per_s} if batch else {}
    knee, default = (batch.knee, batch.default) if batch else (None, None)
    if knee and default in curve and knee in curve and knee != default:
        ratio = curve[knee].samples_per_s / curve[default].samples_per_s
        if ratio > 1.0:
            out.append(
                Recommendation(
                    title=f"batch size {knee} (the knee; the largest that fits is {batch.largest})",
                    gain=Speedup(ratio=ratio, ci95_low=None, ci95_high=None),
                    code=f"model.fit(dataset.batch({knee}), ...)",
                    cost="a larger batch usually needs a larger learning rate (scale it with the batch, "
                    "with warm-up) and can change final accuracy",
                )
            )
    out.sort(key=lambda r: -r.gain.ratio)
    if backend is Backend.tensorflow and on_gpu:  # GPU memory: nothing to say on a CPU
        out.append(
            Recommendation(
                title="memory growth (lets other processes share the GPU; no speedup measured)",
                gain=None,
                code=SNIPPETS["memory_growth"],
                cost="fragmentation can cost a little memory; the largest batch may shrink slightly",
            )
        )
    return out
