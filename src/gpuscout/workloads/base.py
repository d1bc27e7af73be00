"""What a workload is: a model, its synthetic batch, its FLOPs per sample and its defaults.

Workload modules are imported by the parent, so they must not import Keras at module level:
``build_model`` receives the already-imported ``keras`` module in the child.

FLOPs convention (DESIGN.md, as in nanoGPT's MFU estimate and the PaLM appendix): 2 FLOPs per
multiply-add; matrix work only (convolutions, dense layers, and for transformers the two
attention products Q.K^T and A.V, counted over the full sequence even when causal); training
costs 3 x forward (forward, backward w.r.t. activations, backward w.r.t. weights). For a
transformer this is 6N + 12.L.H.Q.T FLOPs per token (N: parameters in matrix products, L
layers, H heads, Q head size, T sequence length).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TRAINING_FLOPS_PER_FORWARD = 3


@dataclass(frozen=True)
class MemoryModel:
    """Peak device memory of a training step = fixed + per_sample x batch (gpuscout/workloads/sizing.py)."""

    fixed_bytes: float
    per_sample_bytes: float  # at the workload's default sequence length


def memory_models(**by_precision: tuple[float, float]) -> dict[str, MemoryModel]:
    """{precision: (fixed GiB, per-sample MiB)}, as benchmarks/memory_model.py prints them."""
    return {p: MemoryModel(fixed * 2**30, per * 2**20) for p, (fixed, per) in by_precision.items()}


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # "image": host data is uint8 HWC and the pipeline decodes/augments it; "vector": float32;
    # "tokens": int32 token ids of length seq_len; "ids": int32 ids of a fixed shape (user models).
    input_kind: str
    # Classes of the classifier; for token workloads the (padded) vocabulary.
    num_classes: int
    default_batch_size: int
    # Size of the workload's reference dataset in `unit`s, for the epoch time.
    reference_dataset_size: int | None  # None: no reference dataset (user models), no epoch time
    reference_dataset: str | None
    unit: str  # what throughput counts: "images", "samples", "tokens"
    build_model: Callable[[Any, int | None], Any]  # (keras, seq_len) -> keras.Model returning logits
    build_optimizer: Callable[[Any], Any]  # (keras) -> keras.optimizers.Optimizer
    # Analytic forward FLOPs of one sample (convention above) for a sequence length (None for
    # fixed-size inputs); tests check it against a count over the built model.
    forward_flops: Callable[[int | None], float]
    fixed_input_shape: tuple[int, ...] | None = None  # per sample, for image/vector inputs
    default_seq_len: int | None = None  # token workloads only
    max_seq_len: int | None = None
    # Token workloads: labels equal to this are ignored by the loss (masked LM: only the
    # masked positions, `masked_fraction` of them, carry a label).
    ignore_label: int | None = None
    masked_fraction: float | None = None
    # Labels per sample: None is one class id (images, vectors) or one per token (tokens);
    # user models give the shape of their output less its class axis.
    label_shape: tuple[int, ...] | None = None
    label_kind: str = "sparse"  # sparse: class ids below num_classes; others: child/user_model.LABEL_KINDS
    vocab_size: int | None = None  # "ids" inputs: integers drawn below this
    # A loss other than sparse cross-entropy on logits: (keras) -> loss
    loss: Callable[[Any], Any] | None = None
    # Peak-memory models by precision (mixed_bfloat16, fp32), measured: see gpuscout/workloads/sizing.py.
    memory: dict[str, MemoryModel] | None = None
    # The gradient bucket of jax's per-replica step over several devices where one was measured for
    # this model (docs/benchmarks.md, "Gradient buckets made in the step"); None: the rule of
    # child/jax_replicas.bucket_size_bytes.
    gradient_bucket_mib: float | None = None

    @property
    def is_sequence(self) -> bool:
        return self.input_kind == "tokens"

    def input_shape(self, seq_len: int | None) -> tuple[int, ...]:
        return (seq_len,) if self.is_sequence else self.fixed_input_shape

    def units_per_sample(self, seq_len: int | None) -> int:
        return seq_len if self.unit == "tokens" else 1

    def build_loss(self, keras):
        """Cross-entropy on logits; masked-LM labels equal to `ignore_label` are left out."""
        if self.loss is not None:
            return self.loss(keras)
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=self.ignore_label)

    def training_flops_per_sample(self, seq_len: int | None = None) -> float:
        return TRAINING_FLOPS_PER_FORWARD * self.forward_flops(seq_len)


def fixed_flops(value: float) -> Callable[[int | None], float]:
    """FLOPs of a fixed-size input, whatever the sequence length."""
    return lambda seq_len: value


def block_matmul_params(width: int, mlp_width: int) -> int:
    """Weights in one transformer block's matrix products: QKV, output, the two MLP matrices."""
    return width * 3 * width + width * width + 2 * width * mlp_width


def transformer_flops(matmul_params: int, layers: int, width: int) -> Callable[[int | None], float]:
    """Forward FLOPs of one sequence of T tokens: T x (2N + 4.L.T.d), the forward third of
    6N + 12LHQT (H.Q = d)."""
    return lambda seq_len: seq_len * (2 * matmul_params + 4 * layers * seq_len * width)
