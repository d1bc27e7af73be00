"""The training step `gpuscout bench`/`scale` builds, with its jitted function kept for inspection
(benchmarks/step_memory.py, step_collectives.py): lower and compile it again to read XLA's view."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class BuiltStep:
    runner: Any  # gpuscout.child.protocol.StepRunner: step(i), sync(handle)
    step: Any  # the jitted step(state, batch)
    state: Any  # the state as placed for it
    batch: Any  # one batch placed as the runner places them

    def compiled(self):
        return self.step.lower(self.state, self.batch).compile()


def build(spec) -> BuiltStep:
    """Sets the seed and precision policy as the child does, then builds the runner for `spec`."""
    import keras

    from gpuscout.child import data, jax_steps
    from gpuscout.workloads import get

    keras.utils.set_random_seed(spec.seed)
    keras.mixed_precision.set_global_policy(spec.precision.keras_policy)
    kept = {}
    original = jax_steps._Placement.train_step

    def keep(placement, model, state):
        step, placed = original(placement, model, state)
        kept.update(step=step, state=placed, put=placement.put)
        return step, placed

    jax_steps._Placement.train_step = keep
    try:
        workload = get(spec.workload)
        runner = jax_steps.build_runner(spec, workload, keras)
    finally:
        jax_steps._Placement.train_step = original
    batch = kept["put"](data.synthetic_batches(workload, spec.batch_size, spec.seed, spec.seq_len)[0])
    return BuiltStep(runner, kept["step"], kept["state"], batch)


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which step to build: --out, --workload, --batch, --precision, --seq-len."""
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workload", default="vit_b16")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--seq-len", type=int, default=None)
