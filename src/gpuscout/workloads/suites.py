"""Named benchmark suites, as code (big_vision's config-as-code): which workloads, at what
batch, under which protocol settings. Explicit command-line options override a suite's.

- quick: every workload at a quarter of its default batch, 5 warm-up steps and 3 windows of 1 s;
  a few minutes on one GPU (docs/benchmarks.md has the H200 figure). Meant for GPUs: on a CPU the
  transformer workloads take minutes per step, and every batch is capped at 32 there, as for any
  CPU run (measure/rules.CPU_DEFAULT_BATCH: Keras fit's default).
- standard: every workload at its reference settings (default batch, the protocol's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout import workloads
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import PROTOCOL, Protocol

# Reference order: small to large, so a broken setup fails on the cheap ones first.
ALL = ("mlp", "resnet18_cifar", "resnet50", "vit_b16", "bert_base", "gpt2_small")


@dataclass(frozen=True)
class Suite:
    name: str
    workloads: tuple[str, ...]
    batch_divisor: int  # each workload's default batch is divided by this (at least 1)
    protocol: Protocol

    def batch_size(self, workload: str) -> int:
        return max(1, workloads.get(workload).default_batch_size // self.batch_divisor)


SUITES = {
    "quick": Suite("quick", ALL, batch_divisor=4, protocol=Protocol(warmup_steps=5, windows=3, window_seconds=1.0)),
    "standard": Suite("standard", ALL, batch_divisor=1, protocol=PROTOCOL),
}


def get(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise UsageError(f"unknown suite {name!r}: choose {', '.join(SUITES)}") from None
