"""What a workload is: a model, its synthetic batch, its FLOPs per sample and its defaults.

Workload modules are imported by the parent, so they must not import Keras at module level:
``build_model`` receives the already-imported ``keras`` module in the child.

FLOPs convention (DESIGN.md, as in nanoGPT's MFU estimate and the PaLM appendix): 2 FLOPs per
multiply-add; only convolutions and dense layers (matrix work) are counted; training costs
3 x forward (forward, backward w.r.t. activations, backward w.r.t. weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

TRAINING_FLOPS_PER_FORWARD = 3


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # Per-sample input shape, without the batch dimension.
    input_shape: tuple[int, ...]
    num_classes: int
    # "image": host data is uint8 HWC and the pipeline decodes/augments it; "vector": float32.
    input_kind: str
    # Analytic forward FLOPs per sample (convention above); tests check it against the model.
    forward_flops_per_sample: float
    default_batch_size: int
    # Samples in the workload's reference dataset, for the epoch time (e.g. ImageNet-1k train).
    reference_dataset_size: int
    reference_dataset: str
    unit: str  # what a sample is called in throughput units ("images", "samples")
    build_model: Callable[[Any], Any]  # (keras) -> keras.Model returning logits
    build_optimizer: Callable[[Any], Any]  # (keras) -> keras.optimizers.Optimizer

    @property
    def training_flops_per_sample(self) -> float:
        return TRAINING_FLOPS_PER_FORWARD * self.forward_flops_per_sample
