"""How a data-parallel run's gradients were exchanged: named from the record, split in compare,
said in scale's verdict."""

import json

from gpuscout import scale
from gpuscout.analysis import communication
from gpuscout.analysis.compare import compare
from gpuscout.core.spec import BatchNormStats, Distribution
from gpuscout.record.child import CollectiveSchedule
from gpuscout.record.run import Distribution as RunDistribution
from gpuscout.record.run import RunRecord
from tests.conftest import FIXTURES
from tests.records import scale_point

GOLDEN = [RunRecord.model_validate(r) for r in json.loads((FIXTURES / "results" / "golden.json").read_text())["runs"]]
OVERLAP = "--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_all_reduce_combine_threshold_bytes=26214400"


def test_the_flags_that_move_collectives_are_named_and_the_rest_ignored():
    flags = f"--xla_force_host_platform_device_count=2 {OVERLAP} --xla_gpu_autotune_level=4"
    assert communication.xla_settings(flags) == [
        "latency-hiding scheduler=true",
        "all-reduce combine threshold=25 MiB",
    ]  # 26,214,400 B / 2^20
    assert communication.xla_settings("--xla_gpu_all_reduce_combine_threshold_bytes=1536") == [
        "all-reduce combine threshold=1536 B"
    ]  # 1.5 KiB: not a whole unit
    assert communication.xla_settings("--xla_gpu_all_reduce_combine_threshold_bytes=4096") == [
        "all-reduce combine threshold=4 KiB"
    ]
    assert communication.describe("jax", 2, None, {"XLA_FLAGS": flags}) == (
        "all-reduces scheduled by XLA with latency-hiding scheduler=true, all-reduce combine threshold=25 MiB"
    )
    assert communication.describe("jax", 2, None, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}) == (
        "all-reduces scheduled by XLA (its default scheduling)"
    )  # no claim of when: XLA's to choose
    assert communication.describe("jax", 2, None, {"NCCL_PROTO": "Simple"}) == (
        "all-reduces scheduled by XLA (its default scheduling; NCCL_PROTO=Simple)"
    )
    assert communication.describe("tensorflow", 2, "NcclAllReduce", {"NCCL_ALGO": "Tree"}) == (
        "NcclAllReduce after the backward pass (NCCL_ALGO=Tree)"
    )
    assert communication.describe("jax", 1, None, {"XLA_FLAGS": OVERLAP}) is None  # nothing exchanged
    # what gpuscout's child sets for jax over several GPUs, and NCCL's channel limits, are settings too
    assert communication.describe(
        "jax",
        2,
        None,
        {"XLA_FLAGS": "--xla_gpu_unsupported_use_all_reduce_one_shot_kernel=false", "NCCL_MAX_NCHANNELS": "8"},
    ) == ("all-reduces scheduled by XLA with one-shot all-reduce kernel=false, NCCL_MAX_NCHANNELS=8")


def test_the_settings_measured_on_two_h200s_are_named_too():
    """Each of these moved a two-GPU step's throughput (docs/benchmarks.md, "Seven more settings on
    two H200s"): a run with one of them must not pool with a run without it."""
    graphs = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION,COLLECTIVES"
    flags = (
        "--xla_gpu_enable_nccl_user_buffers=true --xla_gpu_experimental_enable_nccl_symmetric_buffers "
        f"--xla_gpu_enable_command_buffer={graphs} "
        "--xla_gpu_experimental_collective_start_as_early_as_possible=true "
        "--xla_gpu_experimental_enable_collective_multi_streaming=true --xla_gpu_nccl_collective_max_nchannels=4"
    )
    assert communication.xla_settings(flags) == [  # in the table's order, not the flags'; a bare flag is true
        "collectives started as early as possible=true",
        "collectives on several streams=true",
        "NCCL user buffers=true",
        "NCCL symmetric buffers=true",
        "NCCL channels for collectives=4",
        f"command buffers={graphs}",
    ]
    assert communication.describe("jax", 2, None, {"NCCL_NVLS_ENABLE": "0"}) == (
        "all-reduces scheduled by XLA (its default scheduling; NCCL_NVLS_ENABLE=0)"
    )
    assert communication.describe("tensorflow", 2, "NcclAllReduce", {"NCCL_NVLS_ENABLE": "0"}) == (
        "NcclAllReduce after the backward pass (NCCL_NVLS_ENABLE=0)"
    )
    # NCCL's CTA settings of four-GPU GPT-2 (NCCL_MAX_CTAS=4: 78.5% against 90.1%), in the table's order
    assert communication.describe(
        "jax",
        4,
        None,
        {"NCCL_CGA_CLUSTER_SIZE": "1", "NCCL_MAX_CTAS": "4", "NCCL_CTA_POLICY": "1", "NCCL_DEBUG": "INFO"},
    ) == (
        "all-reduces scheduled by XLA (its default scheduling; NCCL_MAX_CTAS=4; NCCL_CTA_POLICY=1; "
        "NCCL_CGA_CLUSTER_SIZE=1)"
    )


def on_two(run_id: str, xla_flags: str | None, bucket_bytes: int | None = None) -> RunRecord:
    r = next(r for r in GOLDEN if r.id == run_id)
    spec = r.spec.model_copy(
        update={"devices": 2, "distribution": Distribution.mirrored, "batchnorm": BatchNormStats.per_replica}
    )
    env = r.env.model_copy(update={"child_env": {"XLA_FLAGS": xla_flags} if xla_flags else {}})
    distribution = RunDistribution(kind="mirrored", replicas=2, gradient_bucket_bytes=bucket_bytes)
    return r.model_copy(
        update={
            "id": f"{run_id}-{bool(xla_flags)}" + (f"-{bucket_bytes}" if bucket_bytes else ""),
            "devices": 2,
            "spec": spec,
            "env": env,
            "distribution": distribution,
        }
    )


def test_compare_never_pools_runs_of_different_communication_settings():
    runs = [on_two("a100bf16b256", None), on_two("h100bf16b256", None), on_two("h100bf16b256", OVERLAP)]
    (c,) = compare(runs, "gpu")  # the overlapped H100 run has no A100 partner: left out, not pooled
    assert c.held["communication"].endswith("(its default scheduling)")
    assert [g.run_ids for g in c.groups] == [["a100bf16b256-False"], ["h100bf16b256-False"]]
    (c,) = compare(runs, "communication")
    assert sorted(g.run_ids[0] for g in c.groups) == ["h100bf16b256-False", "h100bf16b256-True"]


def test_the_steps_gradient_buckets_are_named_and_never_pooled_with_the_step_before():
    """Since 2026-11-26 gpuscout's jax step averages its gradients in buckets it makes (a size per
    model); a stored run of the step before (a pmean of each gradient) compares apart."""
    one_shot_off = {"XLA_FLAGS": "--xla_gpu_unsupported_use_all_reduce_one_shot_kernel=false"}
    assert communication.describe("jax", 2, None, one_shot_off, gradient_bucket_bytes=8 * 2**20) == (
        "gradients in 8 MiB buckets made by the step, all-reduces scheduled by XLA with "
        "one-shot all-reduce kernel=false"
    )
    assert communication.describe("jax", 2, None, {}, gradient_bucket_bytes=64 * 2**20) == (
        "gradients in 64 MiB buckets made by the step, all-reduces scheduled by XLA (its default scheduling)"
    )
    runs = [
        on_two("h100bf16b256", None),
        on_two("h100bf16b256", None, 8 * 2**20),
        on_two("h100bf16b256", None, 64 * 2**20),
    ]
    (c,) = compare(runs, "communication")
    assert sorted(g.run_ids[0] for g in c.groups) == [
        "h100bf16b256-False",
        "h100bf16b256-False-67108864",
        "h100bf16b256-False-8388608",
    ]
    # by batchnorm the step's buckets follow the mode (Keras' DataParallel makes none); the
    # settings a user gave must still agree
    bucketed = runs[1]
    global_ = on_two("h100bf16b256", None)
    global_ = global_.model_copy(
        update={"id": "global", "spec": global_.spec.model_copy(update={"batchnorm": BatchNormStats.global_})}
    )
    (c,) = compare([bucketed, global_], "batchnorm")
    assert {g.label: g.run_ids for g in c.groups} == {"per_replica": [bucketed.id], "global": ["global"]}
    assert c.held["communication"] == "all-reduces scheduled by XLA (its default scheduling)"
    overlapped = global_.model_copy(update={"env": on_two("h100bf16b256", OVERLAP).env})
    assert compare([bucketed, overlapped], "batchnorm") == []


# The compiled steps of docs/benchmarks.md's "What two GPUs add" (two H100s), as
# child/collectives.schedule read them: GPT-2 small's 15 asynchronous all-reduces, each with kernels
# beside it (the backward pass's or the optimizer's); ResNet-50's 32, 4 of them beside kernels.
GPT2_ON_TWO = CollectiveSchedule(
    collectives=15,
    payload_bytes=652_437_516,
    asynchronous=15,
    beside_compute=15,
    payload_bytes_beside_compute=652_437_516,
)
RESNET50_ON_TWO = CollectiveSchedule(
    collectives=32,
    payload_bytes=102_531_500,
    asynchronous=30,
    beside_compute=4,
    payload_bytes_beside_compute=67_797_416,
)


def test_what_the_compiled_step_sent_in_words():
    assert communication.as_compiled(GPT2_ON_TWO) == (  # 652,437,516 B / 2^20 = 622.2 MiB
        "as compiled, 15 collectives of 622.2 MiB in all, 15 of them (622.2 MiB) beside computation"
    )
    assert communication.as_compiled(RESNET50_ON_TWO) == (  # 102,531,500 / 2^20 = 97.8; 67,797,416 / 2^20 = 64.7
        "as compiled, 32 collectives of 97.8 MiB in all, 4 of them (64.7 MiB) beside computation"
    )
    assert communication.as_compiled(
        CollectiveSchedule(
            collectives=1, payload_bytes=2_678_836, asynchronous=0, beside_compute=0, payload_bytes_beside_compute=0
        )
    ) == ("as compiled, 1 collective of 2.6 MiB in all, none beside computation")
    assert communication.as_compiled(
        CollectiveSchedule(
            collectives=1, payload_bytes=12, asynchronous=0, beside_compute=0, payload_bytes_beside_compute=0
        )
    ) == ("as compiled, 1 collective of 12 B in all, none beside computation")
    assert communication.as_compiled(None) is None  # records from before the field, tensorflow runs


def test_scales_verdict_names_the_communication_it_measured():
    point = scale_point(
        2,
        efficiency={"value": 0.95, "ci95_low": 0.95, "ci95_high": 0.95},
        speedup={"ratio": 1.9, "ci95_low": 1.9, "ci95_high": 1.9},
        meets_expectation=True,
        communication=communication.describe("jax", 2, None, {"XLA_FLAGS": OVERLAP}),
    )
    base = scale_point(1, efficiency={"value": 1.0, "ci95_low": 1.0, "ci95_high": 1.0})
    summary = scale.verdict([base, point], base_ok=True).summary
    assert summary.endswith(
        "Gradients: all-reduces scheduled by XLA with latency-hiding "
        "scheduler=true, all-reduce combine threshold=25 MiB"
    )
    assert "Gradients" not in scale.verdict([base], base_ok=True).summary
    compiled = point.model_copy(update={"collectives": communication.as_compiled(GPT2_ON_TWO)})
    assert scale.verdict([base, compiled], base_ok=True).summary.endswith(
        "combine threshold=25 MiB; as compiled, 15 collectives of 622.2 MiB in all, 15 of them (622.2 MiB) "
        "beside computation (2 devices)"
    )


def test_the_verdict_prints_settings_and_errors_as_written_not_as_markup():
    import io

    from rich.console import Console

    from gpuscout.report.scale import print_scale

    points = [scale_point(1), scale_point(2, "failed", message="NCCL error [red]unhandled[/red] in [bold]ring[/]")]
    report = scale.ScaleReport(
        workload="mlp",
        gpu=None,
        mode="weak",
        backend="jax",
        precision="fp32",
        data="synthetic",
        batchnorm=None,
        device_kind="gpu",
        session="s1",
        elapsed_s=6.0,
        interconnect=None,
        topology=[],
        points=points,
        verdict=scale.verdict(points, True),
    )
    printed = io.StringIO()
    print_scale(report, Console(file=printed, width=200, color_system=None))
    assert "NCCL error [red]unhandled[/red] in [bold]ring[/]" in printed.getvalue()
