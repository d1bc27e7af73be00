import os
import subprocess
import sys

import pytest

from gpuscout import workloads
from gpuscout.errors import UsageError
from gpuscout.workloads.base import Workload


def test_unknown_workload_suggests_close_names():
    with pytest.raises(UsageError, match="did you mean resnet50"):
        workloads.get("resnet5")
    with pytest.raises(UsageError, match="known workloads: mlp, resnet18_cifar, resnet50"):
        workloads.get("zzz")


def test_registry_refuses_duplicates():
    with pytest.raises(ValueError, match="registered twice"):
        workloads.register(workloads.get("mlp"))


def test_training_flops_are_three_forwards():
    w = workloads.get("mlp")
    assert isinstance(w, Workload)
    assert w.training_flops_per_sample == 3 * 2 * (784 * 512 + 512 * 512 + 512 * 10)


@pytest.mark.slow
def test_declared_flops_match_the_models():
    """Each workload's analytic FLOPs equal what the counter finds in the built Keras model."""
    script = (
        "import keras\n"
        "from gpuscout.workloads import get, names\n"
        "from gpuscout.workloads.flops import forward_flops_per_sample\n"
        "for n in names():\n"
        "    w = get(n)\n"
        "    print(n, forward_flops_per_sample(w.build_model(keras)), w.forward_flops_per_sample)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"), timeout=300)
    rows = [line.split() for line in out.stdout.splitlines()]
    assert {r[0] for r in rows} == set(workloads.names())
    for name, counted, declared in rows:
        assert int(counted) == int(declared), name
