"""How much GPU memory a training run needs, before it runs: the fit check and `--batch-size auto`.

Peak device memory of a training step is, to a few percent, linear in the batch:
    peak = fixed + per_sample x batch x (seq_len / default_seq_len)
`fixed` holds the weights, gradients and optimizer state; `per_sample` the activations kept for
the backward pass. Each workload carries its two constants per precision, fitted from the JAX
allocator's peak at two batch sizes on an H200 (benchmarks/memory_model.py; docs/benchmarks.md
has the points). Sequence length scales `per_sample` linearly: measured 3.93x for BERT at 4x the
length and 0.23x for GPT-2 at a quarter (fused attention keeps activations linear in length).
Half precisions share the mixed_bfloat16 constants; fp32 without a measurement is taken as twice
the activations (measured 1.9-2.1x, except GPT-2's fp32 logits: 4.1x).

The estimate is of the JAX backend's allocator; TensorFlow's differs by its own overheads, so the
check only refuses a run when the estimate is clearly over (CLEAR_OVERFLOW) and records `oom`
otherwise.
"""

from __future__ import annotations

import math

from gpuscout.core.spec import Precision
from gpuscout.workloads.base import MemoryModel, Workload

GIB = 2**30
# A run is refused before it starts when its estimate exceeds the GPU's memory by this factor:
# the fitted models were within 3% of the measured peaks, so 25% over is clearly over.
CLEAR_OVERFLOW = 1.25
# `--batch-size auto` leaves this share of the GPU free: the CUDA context, cuDNN/cuBLAS
# workspaces and the allocator's fragmentation are outside the allocator peak (NVML read
# 19.5-22.8 GB for a 10.2 GiB allocator peak of ResNet-50 on the H200).
AUTO_MEMORY_SHARE = 0.8
# `auto` scales the workload's default batch by powers of two, at most by this factor: a far
# larger batch changes the training (learning rate, convergence) more than it speeds it up.
AUTO_MAX_SCALE = 4


def estimate_bytes(
    workload: Workload, batch_size: int, precision: Precision, seq_len: int | None = None
) -> float | None:
    """Estimated peak device memory of one training run; None when the workload has no model."""
    models = workload.memory
    if not models:
        return None
    model = models.get(Precision.fp32.value if precision is Precision.fp32 else Precision.mixed_bfloat16.value)
    if model is None and precision is Precision.fp32 and Precision.mixed_bfloat16.value in models:
        half = models[Precision.mixed_bfloat16.value]
        model = MemoryModel(half.fixed_bytes, 2 * half.per_sample_bytes)
    if model is None:
        return None
    length = 1.0
    if workload.is_sequence and seq_len is not None:
        length = seq_len / workload.default_seq_len
    return model.fixed_bytes + model.per_sample_bytes * batch_size * length


def largest_fitting_batch(workload: Workload, precision: Precision, seq_len: int | None, budget_bytes: float) -> int:
    """The largest batch whose estimate is within the budget (0 when not even one sample fits)."""
    fixed = estimate_bytes(workload, 0, precision, seq_len)
    per = estimate_bytes(workload, 1, precision, seq_len) - fixed
    if fixed > budget_bytes:
        return 0
    return math.floor((budget_bytes - fixed) / per) if per > 0 else 1_000_000


def fitting_batch(
    workload: Workload, precision: Precision, seq_len: int | None, memory_total_bytes: int | None
) -> int | None:
    """The largest batch whose estimate fits in the share of the GPU that `--batch-size auto` uses;
    None without a memory model or a memory size."""
    if memory_total_bytes is None or estimate_bytes(workload, 1, precision, seq_len) is None:
        return None
    return largest_fitting_batch(workload, precision, seq_len, AUTO_MEMORY_SHARE * memory_total_bytes)


def auto_batch_size(
    workload: Workload, precision: Precision, seq_len: int | None, memory_total_bytes: int | None
) -> int:
    """The default batch times the largest power of two (at most AUTO_MAX_SCALE, as small as it
    must be) whose estimate fits in AUTO_MEMORY_SHARE of the GPU. The default batch itself on a
    CPU or where the memory is unknown."""
    default = workload.default_batch_size
    fits = fitting_batch(workload, precision, seq_len, memory_total_bytes)
    if fits is None:
        return default
    batch = default * AUTO_MAX_SCALE
    while batch > 1 and batch > fits:
        batch //= 2
    return batch


def clearly_too_big(
    workload: Workload, batch_size: int, precision: Precision, seq_len: int | None, memory_total_bytes: int | None
) -> str | None:
    """A one-line reason when the run clearly cannot fit, else None (unknown counts as may fit)."""
    if memory_total_bytes is None:
        return None
    need = estimate_bytes(workload, batch_size, precision, seq_len)
    if need is None or need <= CLEAR_OVERFLOW * memory_total_bytes:
        return None
    fits = fitting_batch(workload, precision, seq_len, memory_total_bytes)
    advice = (
        f"try --batch-size {fits} or less, or --batch-size auto"
        if fits >= 1
        else "not even batch 1 fits: use a GPU with more memory"
    )
    return (
        f"{workload.name} at batch {batch_size} ({precision.value}) needs about "
        f"{need / GIB:.0f} GiB, the GPU has {memory_total_bytes / GIB:.0f} GiB: {advice}"
    )


AUTO_TABLE_GIB = (16, 24, 48, 80, 141)


def auto_table(workload_names: list[str], precision: Precision = Precision.mixed_bfloat16) -> list[dict]:
    """What `--batch-size auto` picks for each workload at common GPU memory sizes (the table in
    docs/methodology.md is this function's output)."""
    from gpuscout import workloads

    rows = []
    for name in workload_names:
        w = workloads.get(name)
        rows.append(
            {
                "workload": name,
                "default": w.default_batch_size,
                **{f"{gib} GiB": auto_batch_size(w, precision, w.default_seq_len, gib * GIB) for gib in AUTO_TABLE_GIB},
            }
        )
    return rows


if __name__ == "__main__":  # prints the documented table: python -m gpuscout.workloads.sizing
    from gpuscout.workloads.suites import ALL

    for precision in (Precision.mixed_bfloat16, Precision.fp32):
        table = auto_table(list(ALL), precision)
        print(f"\n{precision.value}\n\n| workload | default | " + " | ".join(f"{g} GiB" for g in AUTO_TABLE_GIB) + " |")
        print("|---" * (2 + len(AUTO_TABLE_GIB)) + "|")
        for row in table:
            print(
                f"| {row['workload']} | {row['default']} | "
                + " | ".join(str(row[f"{g} GiB"]) for g in AUTO_TABLE_GIB)
                + " |"
            )
