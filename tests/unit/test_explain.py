"""`gpuscout doctor --explain`'s reading of logs (gpuscout/explain/): real messages from
TensorFlow, JAX/XLA, CUDA, cuDNN and NCCL, each from the public report known.toml cites, against
a fake machine; the root cause first; the fix names this machine's facts."""

import io

import pytest
from rich.console import Console

from gpuscout.explain import Context, Machine, explain
from gpuscout.explain.machine import Framework, Gpu
from gpuscout.explain.table import failure_classes
from gpuscout.record.run import ErrorDetail
from gpuscout.report.console import print_run
from tests.explain_cases import CASES
from tests.records import make_record

GiB = 2**30


def machine(only: str | None = None, **overrides) -> Machine:
    """A100 40 GB, driver 535 (CUDA 12.2), TensorFlow 2.18 built for CUDA 12.5.1 / cuDNN 9,
    jax 0.4.38 with CUDA 12.6 (`only`: just that one installed); another process holds 10 GiB."""
    base = dict(
        driver_version="535.183.01",
        cuda_driver_version="12.2",
        gpus=[Gpu(0, "NVIDIA A100-SXM4-40GB", 40 * GiB, "8.0", others_bytes=10 * GiB, other_pids=[4242])],
        frameworks={
            "tensorflow": Framework(
                "tensorflow",
                "2.18.0",
                "12.5.1",
                "9",
                True,
                1,
                ["sm_60", "sm_70", "compute_80"],
                ["/usr/lib/x86_64-linux-gnu/libcudnn.so.9"],
            ),
            "jax": Framework("jax", "0.4.38", "12.6", "9.5.1", True, 1),
        },
        env={},
    )
    if only:
        base["frameworks"] = {only: base["frameworks"][only]}
    base.update(overrides)
    return Machine(**base)


@pytest.mark.parametrize("message, code, in_cause, in_fix", CASES, ids=[c[1] for c in CASES])
def test_each_real_message_gets_its_cause_and_this_machines_fix(message, code, in_cause, in_fix):
    # the framework that wrote each message is the one installed (jax's for jax's messages)
    jax = any(w in message for w in ("jax", "stream_executor_util", "cudamallocasync", "nccl_utils", "asm_compiler"))
    (found,) = explain(message, machine(only="jax" if jax else "tensorflow"))
    assert found.code == code and found.line == 1 and found.source.startswith("https://")
    assert found.evidence == message.strip()[:300] or found.evidence.endswith("…")
    for words in in_cause:
        assert words in found.cause, (words, found.cause)
    for words in in_fix:
        assert words in found.fix, (words, found.fix)


def test_each_message_is_found_on_its_line_among_thousands_of_others():
    """The whole text is searched once for each class before the lines are (issue 87, item 10: a
    200 MB log took 10 s): a message amid other lines, its pattern anchored at a line's end or
    not, is found on its own line, once."""
    noise = [f"I1207 12:00:{i % 60:02d}.000 step {i} loss 0.{i}" for i in range(2000)]
    for message, code, _, _ in CASES:
        text = "\n".join([*noise, message.strip(), *noise])
        jax = "jax" in message or "stream_executor_util" in message
        found = {e.code: e for e in explain(text, machine(only="jax" if jax else "tensorflow"))}
        lines = message.strip().count("\n") + 1
        assert code in found and len(noise) < found[code].line <= len(noise) + lines, code


def test_every_class_in_the_table_has_a_case_here():
    assert {c.code for c in failure_classes()} == {case[1] for case in CASES}
    assert len(CASES) >= 30  # issue 78: thirty families or more


def test_a_log_with_several_failures_names_the_root_first():
    log = "\n".join(
        [
            "2025-02-04 20:38:49 I tensorflow/core/platform/cpu_feature_guard.cc:210] "
            "This TensorFlow binary is optimized",
            CASES[2][0],  # the cuDNN mismatch, line 2
            CASES[2][0],  # printed twice, as TensorFlow does
            "Traceback (most recent call last):",
            CASES[3][0],  # DNN library initialization failed: its echo, line 5
            CASES[8][0],  # an unrelated out-of-memory later, line 6
        ]
    )
    found = explain(log, machine())
    assert [(e.code, e.line, e.echo_of) for e in found] == [
        ("cudnn_version_mismatch", 2, None),
        ("gpu_oom_xla", 6, None),
        ("dnn_unavailable", 5, "cudnn_version_mismatch"),
    ]
    assert found[0].occurrences == 2
    assert found[2].fix == "follows from cudnn_version_mismatch (line 2): its fix applies"


def test_an_unknown_error_is_not_guessed_at():
    assert (
        explain(
            "ValueError: Input 0 of layer dense is incompatible with the layer: expected axis -1 to have value 784",
            machine(),
        )
        == []
    )


def test_the_oom_fix_names_the_batch_that_fits_from_the_memory_model():
    from gpuscout import workloads
    from gpuscout.core.spec import Precision
    from gpuscout.workloads import sizing

    context = Context(workload="resnet50", batch_size=512, precision="fp32", framework="jax")
    (found,) = explain(CASES[8][0], machine(), context)
    budget = sizing.AUTO_MEMORY_SHARE * 30 * GiB  # 40 GiB less the other process's 10
    fp32 = sizing.largest_fitting_batch(workloads.get("resnet50"), Precision.fp32, None, budget)
    bf16 = sizing.largest_fitting_batch(workloads.get("resnet50"), Precision.mixed_bfloat16, None, budget)
    assert 0 < fp32 < bf16
    assert f"batch {fp32} per GPU fits (80% of 30.00 GiB not held by others), the run asked for 512" in found.fix
    assert f"in mixed_bfloat16, batch {bf16}" in found.fix
    # jax preallocation is named unless it is off
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" in found.fix
    (quiet,) = explain(CASES[8][0], machine(env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}), context)
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in quiet.fix


def test_the_framework_is_read_from_the_log_when_the_run_is_unknown():
    tf_only = machine(frameworks={"jax": machine().frameworks["jax"], "tensorflow": machine().frameworks["tensorflow"]})
    (found,) = explain(
        CASES[2][0].replace("cuda_dnn.cc", "external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc") + " jaxlib",
        tf_only,
    )
    assert "jax[cuda12]==0.4.38" in found.fix
    (found,) = explain("W tensorflow/x.cc] " + CASES[2][0], tf_only)
    assert "tensorflow[and-cuda]==2.18.0" in found.fix


def test_a_driver_newer_than_cuda_13_is_not_asked_to_be_upgraded_for_jax():
    new = machine(cuda_driver_version="13.0", frameworks={})
    (found,) = explain(CASES[5][0], new)
    assert "jax[cuda13]" in found.fix


def test_no_kernel_image_names_the_architectures_tensorflow_was_built_for():
    (found,) = explain(CASES[10][0], machine(only="tensorflow"))
    assert "was built for sm_60, sm_70, compute_80: install a build that includes sm_80" in found.fix


def test_with_two_frameworks_and_a_log_that_names_neither_both_installs_are_given():
    (found,) = explain(CASES[2][0], machine())
    assert "tensorflow[and-cuda]==2.18.0" in found.fix and "jax[cuda12]==0.4.38" in found.fix


def test_a_library_that_loads_but_lacks_its_own_dependency_is_not_blamed():
    """The loader's message for libcudnn_ops_infer names libcublas as the file it could not open:
    the cause and the fix are libcublas's, and the asked-for library is not called missing."""
    found = explain(
        "Could not load library libcudnn_ops_infer.so.8. Error: libcublas.so.11: cannot open shared "
        "object file: No such file or directory",
        machine(),
    )
    assert [e.code for e in found] == ["library_dependency_missing"]
    assert "nvidia-cudnn" not in found[0].fix and "nvidia-cublas-cu12" in found[0].fix
    same = explain(
        "Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open "
        "shared object file: No such file or directory",
        machine(),
    )
    assert [e.code for e in same] == ["library_missing"]


def test_a_failed_download_says_where_keras_looks_for_the_file():
    url = "https://storage.googleapis.com/tensorflow/keras-applications/resnet/resnet50_weights_tf_dim_ordering_tf_kernels.h5"
    (found,) = explain(
        f"Exception: URL fetch failure on {url}: None -- [Errno 111] Connection refused",
        machine(env={"KERAS_HOME": "/data/keras", "HTTPS_PROXY": "http://proxy:3128"}),
    )
    assert f"/data/keras/models/{url.rsplit('/', 1)[-1]}" in found.fix
    assert "a proxy is set (HTTPS_PROXY=http://proxy:3128)" in found.fix
    (bare,) = explain(
        "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>", machine()
    )
    assert bare.code == "download_failed" and "HTTPS_PROXY" in bare.fix
    (secret,) = explain(
        f"Exception: URL fetch failure on {url}: None -- timed out",
        machine(env={"https_proxy": "http://me:hunter2@proxy:3128"}),
    )
    assert "hunter2" not in secret.fix and "https_proxy=http://***@proxy:3128" in secret.fix


def test_an_unknown_xla_flag_is_named_with_the_jax_that_refused_it():
    # as jax 0.11.2 stopped a gpuscout scale worker on two H100s (2026-11-25)
    log = (
        "F1125 21:24:52.785886    2324 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: "
        "--xla_gpu_all_reduce_contiguous=false"
    )
    (found,) = explain(log, machine(only="jax"))
    assert found.code == "xla_flag_unknown" and found.cause.endswith(": --xla_gpu_all_reduce_contiguous=false")
    assert found.fix.startswith("take --xla_gpu_all_reduce_contiguous=false out of XLA_FLAGS;")
    assert "(jax 0.4.38 here)" in found.fix


def test_results_show_prints_a_failed_runs_error_and_what_it_means():
    # `scale` says "see the run's error (gpuscout results show RUN_ID)": that view must hold it
    tail = (
        "I0000 port.cc:153] oneDNN custom operations are on.\nF1125 21:46:34.081771 6488 "
        "parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_gpu_all_reduce_contiguous=false\n"
    )
    error = ErrorDetail(
        message="the worker exited with code 1 without a result",
        stderr_tail=tail,
        returncode=1,
        explanations=explain(tail, machine(only="jax")),
    )
    out = Console(file=io.StringIO(), width=200, color_system=None)
    print_run(out, make_record("c30664532d5b", status="failed", error=error))
    text = out.file.getvalue()
    for shown in (
        "failed c30664532d5b mlp: the worker exited with code 1 without a result",
        "Unknown flag in XLA_FLAGS: --xla_gpu_all_reduce_contiguous=false",
        "take --xla_gpu_all_reduce_contiguous=false out of XLA_FLAGS",
    ):
        assert shown in text, (shown, text)
