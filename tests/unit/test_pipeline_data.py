"""The host pipelines' per-sample work, on image-shaped data (the CLI tests use the MLP)."""

import numpy as np
import pytest

from gpuscout.child import data
from gpuscout.core.spec import Backend, DataMode, build_spec
from gpuscout.workloads import get


def test_synthetic_batches_are_random_rotated_and_bounded():
    batches = data.synthetic_batches(get("resnet18_cifar"), 8, seed=1)
    assert 2 <= len(batches) <= data.SYNTHETIC_BATCHES_MAX
    x, y = batches[0]
    assert x.shape == (8, 32, 32, 3) and x.dtype == np.float32 and np.abs(x).sum() > 0
    assert not np.array_equal(batches[0][0], batches[1][0])
    assert y.min() >= 0 and y.max() < 10
    big = data.synthetic_batches(get("resnet50"), 512, seed=1)  # 308 MB a batch: only 3 fit in 1 GiB
    assert len(big) == 3


def test_numpy_augmentation_decodes_and_normalises_images():
    x, _ = data.host_dataset(get("resnet18_cifar"), 4, seed=0)
    assert x.dtype == np.uint8 and x.shape == (4 * data.PIPELINE_HOST_BATCHES, 32, 32, 3)
    out = data.augment_numpy(x[:4], np.random.default_rng(0), cost=2, kind="image")
    assert out.dtype == np.float32 and out.shape == (4, 32, 32, 3)
    assert np.allclose(out.mean(axis=(1, 2, 3)), 0.0, atol=1e-5)


@pytest.mark.slow
def test_tf_dataset_batches_and_augments_images():
    tf = pytest.importorskip("tensorflow")
    from gpuscout.child.tensorflow_steps import tf_dataset

    workload = get("resnet18_cifar")
    spec = build_spec(
        workload="resnet18_cifar", backend=Backend.tensorflow, batch_size=4, data=DataMode.pipeline, pipeline_cost=2
    )
    x, y = data.host_dataset(workload, 4, seed=0)
    xb, yb = next(iter(tf_dataset(tf, x, y, spec, workload)))
    assert xb.shape == (4, 32, 32, 3) and xb.dtype == tf.float32 and yb.shape == (4,)
    assert np.allclose(tf.reduce_mean(xb, axis=(1, 2, 3)).numpy(), 0.0, atol=1e-5)
