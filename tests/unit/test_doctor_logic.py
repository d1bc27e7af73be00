from gpuscout.core.spec import Backend
from gpuscout.doctor import tensor_core_paths
from gpuscout.doctor.checks import _invisible_gpu


def test_tensor_core_paths_by_compute_capability():
    assert tensor_core_paths("6.1") == []
    assert tensor_core_paths("7.5") == ["fp16"]
    assert tensor_core_paths("9.0") == ["fp16", "bf16", "tf32"]
    assert tensor_core_paths(None) == []


def test_framework_built_for_a_newer_cuda_than_the_driver(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    check = _invisible_gpu(Backend.tensorflow, "2.21.0", {"built_with_cuda": True, "cuda_version": "12.5"}, "11.8")
    assert check.status == "fail" and "built for CUDA 12.5" in check.message and "11.8" in check.message
    assert "upgrade the NVIDIA driver" in check.fix


def test_hidden_gpus_are_named(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    check = _invisible_gpu(Backend.jax, "0.10", {"built_with_cuda": True}, "12.4")
    assert "hides every GPU" in check.message
