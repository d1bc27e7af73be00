"""Per-replica batch norm on jax data parallelism (child/jax_replicas.py) against the same model
computed by hand, on two and four logical CPU devices (issues 20, 34); and tensorflow's global
batch norm."""

import numpy as np
import pytest

from tests.conftest import fixture_json

pytest.importorskip("jax")
pytest.importorskip("keras")


@pytest.fixture(scope="module")
def trajectories():
    # NPROC: each logical device's all-reduce holds a thread of XLA's CPU pool (executor/local.py)
    return fixture_json(
        "replica_batchnorm.py",
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu", "NPROC": "12"},
    )


@pytest.mark.parametrize("devices", [2, 4])
def test_per_replica_step_matches_statistics_per_shard_by_hand(trajectories, devices):
    suffix = "" if devices == 2 else f"_{devices}"
    losses, moving, _ = trajectories["per_replica" + suffix]
    hand_losses, hand_moving = trajectories["hand_per_replica" + suffix]
    np.testing.assert_allclose(losses, hand_losses, rtol=1e-5)
    for name in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(moving[name], hand_moving[name], rtol=1e-5, atol=1e-6)
    if devices == 4:  # four shards' statistics are not two's: the count reached the step
        assert abs(losses[0] - trajectories["per_replica"][0][0]) > 0.01


def test_global_mode_is_keras_own_and_differs_from_per_replica(trajectories):
    losses, moving = trajectories["global"]
    hand_losses, hand_moving = trajectories["hand_global"]
    np.testing.assert_allclose(losses, hand_losses, rtol=1e-5)
    np.testing.assert_allclose(moving["moving_variance"], hand_moving["moving_variance"], rtol=1e-5)
    # the shards were made to differ: the two semantics must not agree (or the test tells nothing)
    assert abs(losses[-1] - trajectories["per_replica"][0][-1]) > 0.1


def test_tensorflow_global_batchnorm_normalises_over_the_whole_batch():
    """`--batchnorm global` on tensorflow (synchronized BN under MirroredStrategy): after one step
    the moving variance is the whole batch's; per replica it is the first replica's shard's."""
    out = fixture_json("tf_batchnorm.py", env={"CUDA_VISIBLE_DEVICES": ""})
    np.testing.assert_allclose(out["global"], out["hand_global"], rtol=1e-5)
    np.testing.assert_allclose(out["per_replica"], out["hand_first_replica"], rtol=1e-5)
    assert np.max(np.abs(np.subtract(out["global"], out["per_replica"]))) > 0.1  # the shards were made to differ


def test_bucketed_mean_averages_as_one_all_reduce_per_bucket(trajectories):
    """The same trajectory and moving statistics as a pmean of each array; fewer all-reduces.
    Before XLA combines any, that step has one per array: 5 gradients, 2 moving statistics, the
    loss tracker's total and count, and the logged loss (10). The child's bucket for this 228-byte
    model is the smallest, 1 MiB: one bucket of each kind, as 1 GiB's."""
    losses, moving, all_reduces = trajectories["pmean_each"]
    assert all_reduces == 10
    for name, expected in (("bucketed_40", 5), ("per_replica", 4)):
        b_losses, b_moving, b_all_reduces = trajectories[name]
        np.testing.assert_allclose(b_losses, losses, rtol=1e-6)
        for stat in ("moving_mean", "moving_variance"):
            np.testing.assert_allclose(b_moving[stat], moving[stat], rtol=1e-6)
        # 40 B: gradients in two buckets ([b2, w2, beta] = 68 B, [gamma, w1]), the moving statistics
        # (64 B) in one, the tracker's 8 B in one, the loss: 5; 1 GiB: one bucket each, 4
        assert b_all_reduces == expected, name


def test_gradients_exchanged_in_bfloat16_halve_their_bytes_and_keep_the_trajectory(trajectories):
    """benchmarks/step_buckets.py's `SIZE:bfloat16`: the 228 bytes of float32 gradients go as 114,
    the rest as before (the moving statistics 64, the tracker's 8, the loss 4); the losses within
    bfloat16's rounding of the exact ones."""
    exact_losses, _, exact_bytes = trajectories["bucketed_1gib"]
    losses, _, wire_bytes = trajectories["bucketed_1gib_bf16"]
    assert exact_bytes == 228 + 64 + 8 + 4
    assert wire_bytes == 114 + 64 + 8 + 4
    np.testing.assert_allclose(losses, exact_losses, rtol=2e-2)
    np.testing.assert_allclose(trajectories["pmean_each"][0], exact_losses, rtol=1e-6)


def test_the_childs_bucket_size_by_hand():
    from gpuscout.child.jax_replicas import bucket_size_bytes

    mib = 2**20
    assert bucket_size_bytes(100 * mib) == 12 * mib  # an eighth, 12.5 MiB, in whole MiB
    assert bucket_size_bytes(800 * mib) == 64 * mib  # never over 64 MiB
    assert bucket_size_bytes(228) == mib  # never under 1 MiB
    assert bucket_size_bytes(100 * mib, measured_mib=8) == 8 * mib  # a workload's measured size wins


def test_buckets_are_cut_last_array_first():
    from gpuscout.child.jax_replicas import buckets

    assert buckets([128, 32, 32, 32, 4], 40) == [[4, 3, 2], [1, 0]]  # 4+32+32 = 68 >= 40; then 32+128
    assert buckets([8, 8, 8], 8) == [[2], [1], [0]]
    assert buckets([8, 8, 8], 100) == [[2, 1, 0]]  # the last run may be smaller than a bucket
    assert buckets([], 8) == []
