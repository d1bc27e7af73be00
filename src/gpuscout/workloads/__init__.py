"""Workload registry: one module per workload, found by name; duplicates are refused."""

from __future__ import annotations

import difflib

from gpuscout.core.errors import UsageError
from gpuscout.workloads.base import Workload

_REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    if workload.name in _REGISTRY:
        raise ValueError(f"workload {workload.name!r} is registered twice")
    _REGISTRY[workload.name] = workload
    return workload


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Workload:
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, names(), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(f"unknown workload {name!r}: {hint}known workloads: {', '.join(names())}") from None


def for_spec(spec) -> Workload:
    """The workload a run measures: a registered one, or the user's model it inspected."""
    if spec.model_info is not None:
        from gpuscout.workloads.user import workload_from_info

        return workload_from_info(spec.model_info)
    return get(spec.workload)


# Importing the modules registers them (keep this list sorted; each module is one workload).
from gpuscout.workloads import bert_base, gpt2_small, mlp, resnet18_cifar, resnet50, vit_b16  # noqa: E402,F401
