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


def step_spec(workload: str, precision: str, batch_per_device: int, seq_len: int | None = None, devices: int = 1):
    """The jax RunSpec `gpuscout bench` plans (one device), or `gpuscout scale` (weak scaling: the
    batch is per device, per-replica batch norm), with the sequence length resolved as they do
    (the workload's default when not given)."""
    import jax

    from gpuscout.core.spec import Backend, BatchNormStats, Distribution, Precision, RunSpec
    from gpuscout.measure import rules
    from gpuscout.workloads import get

    common = {
        "workload": workload,
        "backend": Backend.jax,
        "precision": Precision(precision),
        "seq_len": rules.seq_len(get(workload), seq_len),
    }
    if devices == 1:
        return RunSpec(**common, batch_size=batch_per_device, gpu_index=0)
    on_gpu = jax.default_backend() == "gpu"
    return RunSpec(
        **common,
        batch_size=batch_per_device * devices,
        devices=devices,
        distribution=Distribution.mirrored,
        batchnorm=BatchNormStats.per_replica,
        gpu_index=0 if on_gpu else None,
        gpu_indices=tuple(range(devices)) if on_gpu else None,
    )


def build(spec) -> BuiltStep:
    """Sets the seed and precision policy as the child does, then builds the runner for `spec`."""
    import keras

    from gpuscout.child import data, jax_steps
    from gpuscout.workloads import get

    keras.utils.set_random_seed(spec.seed)
    keras.mixed_precision.set_global_policy(spec.precision.keras_policy)
    kept = {}
    original = jax_steps._Placement.train_step

    def keep(placement, model, state, *rest):
        step, placed = original(placement, model, state, *rest)
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


def require_devices(devices: int) -> bool:
    """Whether jax runs on GPUs; exits with what to set when a CPU has fewer devices than asked."""
    import sys

    import jax

    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and len(jax.devices()) < devices:
        sys.exit(
            f"jax sees {len(jax.devices())} device(s); on a CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={devices}"
        )
    return on_gpu


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which step to build: --out, --workload, --batch, --precision, --seq-len."""
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workload", default="vit_b16")
    parser.add_argument(
        "--batch", type=int, default=None, help="per device (default: the workload's own, as `gpuscout bench` takes it)"
    )
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--seq-len", type=int, default=None)


def parse_step_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed options, --batch the workload's default batch where not given (a ViT's 256
    sequences of 1,024 tokens asked GPT-2 small for 94 GiB of an 80 GiB GPU)."""
    from gpuscout.workloads import get

    args = parser.parse_args()
    if args.batch is None:
        args.batch = get(args.workload).default_batch_size
    return args
