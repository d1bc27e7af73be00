import pytest

from gpuscout.cli.options import protocol_options
from gpuscout.core import backends
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import PROTOCOL, Backend, build_spec
from gpuscout.measure.engine import MeasureOptions
from gpuscout.measure.plans import BenchOptions, plan
from gpuscout.measure.rules import DeviceChoice
from gpuscout.telemetry.fake import FakeNvml
from gpuscout.telemetry.nvml import Nvml

NO_GPU = Nvml(FakeNvml({"init_error": "Driver Not Loaded", "gpus": []}))


def one_gpu(cc=(9, 0)):
    return Nvml(
        FakeNvml(
            {
                "gpus": [
                    {
                        "name": "Tesla T4" if cc < (8, 0) else "NVIDIA H200",
                        "compute_capability": list(cc),
                        "processes": [],
                    }
                ]
            }
        )
    )


def test_batch_size_below_one_names_the_field():
    with pytest.raises(UsageError, match="invalid batch_size: .*greater than or equal to 1"):
        build_spec(workload="mlp", backend=Backend.jax, batch_size=0)


def test_jax_without_xla_is_refused():
    with pytest.raises(UsageError, match="always compiles with XLA"):
        build_spec(workload="mlp", backend=Backend.jax, batch_size=8, xla=False)


def test_plan_defaults_to_cpu_without_gpu_and_says_so():
    specs, notice = plan(["mlp"], BenchOptions(backend="jax"), NO_GPU)
    assert specs[0].gpu_index is None and specs[0].batch_size == 32  # Keras fit's default, not the GPU's 256
    assert "no NVIDIA GPU found" in notice and "CPU defaults: batch 32 at most (Keras fit's default)" in notice


def test_cpu_defaults_are_what_keras_fit_does_on_a_cpu():
    """On a CPU-only machine Keras' fit runs tensorflow without XLA (jit_compile="auto"): XLA made
    keras-io's text classifier 8x slower there. An explicit choice is kept."""
    (tf_cpu,), notice = plan(["resnet18_cifar"], BenchOptions(backend="tensorflow"), NO_GPU)
    assert not tf_cpu.xla and tf_cpu.batch_size == 32 and "XLA off, as Keras' fit" in notice
    (asked,), _ = plan(["resnet18_cifar"], BenchOptions(backend="tensorflow", xla=True, batch_size=128), NO_GPU)
    assert asked.xla and asked.batch_size == 128
    (tf_gpu,), notice = plan(["resnet18_cifar"], BenchOptions(backend="tensorflow"), one_gpu())
    assert tf_gpu.xla and tf_gpu.batch_size == 512 and notice is None


def test_plan_picks_gpu_zero_when_there_is_one():
    specs, notice = plan(["mlp", "resnet50"], BenchOptions(backend="jax", batch_size=64), one_gpu())
    assert [s.gpu_index for s in specs] == [0, 0] and notice is None
    assert [s.batch_size for s in specs] == [64, 64]


@pytest.mark.parametrize(
    "options, message",
    [
        (BenchOptions(backend="jax", precision="fp16"), "unknown precision 'fp16'"),
        (BenchOptions(backend="cuda"), "unknown backend 'cuda'"),
        (BenchOptions(backend="jax", batch_size=0), "--batch-size must be >= 1"),
        (BenchOptions(backend="jax", repeats=0), "--repeats must be >= 1"),
        (BenchOptions(backend="jax", measure=MeasureOptions(timeout_s=0)), "--timeout must be > 0"),
        (BenchOptions(backend="jax", data="disk"), "unknown --data 'disk'"),
        (BenchOptions(backend="jax", device=DeviceChoice(gpu=0, cpu=True)), "exclude each other"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(options, message):
    with pytest.raises(UsageError, match=message):
        plan(["mlp"], options, NO_GPU)


def test_a_bad_protocol_option_is_named():
    options = protocol_options(PROTOCOL)(windows=0)
    with pytest.raises(UsageError, match="invalid --windows: Input should be greater than or equal to 1"):
        options.settings()
    assert protocol_options(PROTOCOL)(windows=7).settings().model_dump() == {**PROTOCOL.model_dump(), "windows": 7}


def test_gpu_index_must_exist():
    with pytest.raises(UsageError, match="GPU index 3 not found: this machine has 1 GPU"):
        plan(["mlp"], BenchOptions(backend="jax", device=DeviceChoice(gpu=3)), one_gpu())
    with pytest.raises(UsageError, match="NVML found no GPU"):
        plan(["mlp"], BenchOptions(backend="jax", device=DeviceChoice(gpu=0)), NO_GPU)


def test_bfloat16_needs_ampere():
    with pytest.raises(UsageError, match="compute capability 7.5.*mixed_float16"):
        plan(["mlp"], BenchOptions(backend="jax", precision="mixed_bfloat16"), one_gpu((7, 5)))


def test_missing_backend_names_the_extra(monkeypatch):
    monkeypatch.setattr(backends, "is_installed", lambda b: b is Backend.jax)
    with pytest.raises(UsageError, match=r"'tensorflow' is not installed: pip install 'gpuscout\[tensorflow\]'"):
        plan(["mlp"], BenchOptions(backend="tensorflow"), NO_GPU)
    assert backends.resolve("auto") is Backend.jax


def test_unknown_workload_stops_the_plan():
    with pytest.raises(UsageError, match="unknown workload 'resnet5'"):
        plan(["mlp", "resnet5"], BenchOptions(backend="jax"), NO_GPU)


def test_suites_set_batches_and_protocol():
    from gpuscout.workloads import suites

    quick = suites.get("quick")
    assert quick.workloads == suites.ALL and quick.batch_size("resnet50") == 64 and quick.batch_size("gpt2_small") == 4
    assert suites.get("standard").batch_size("resnet50") == 256
    batches = {n: quick.batch_size(n) for n in quick.workloads}
    specs, _ = plan(list(quick.workloads), BenchOptions(backend="jax"), one_gpu(), batches)
    assert [(s.workload, s.batch_size, s.seq_len) for s in specs][-2:] == [
        ("bert_base", 64, 128),
        ("gpt2_small", 4, 1024),
    ]
    specs, _ = plan(list(quick.workloads), BenchOptions(backend="jax"), NO_GPU, batches)  # on a CPU: 32 at most
    assert [(s.workload, s.batch_size) for s in specs][-2:] == [("bert_base", 32), ("gpt2_small", 4)]
    with pytest.raises(UsageError, match="unknown suite 'fast': choose quick, standard"):
        suites.get("fast")
