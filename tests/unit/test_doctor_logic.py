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


def test_doctor_says_which_keras_and_which_backend_a_script_gets(tmp_path):
    """KERAS_BACKEND first, then KERAS_HOME's keras.json, then Keras' default (issue 62, item 7);
    a backend that is not installed fails with the install, or the backend that is."""
    import json

    from gpuscout.doctor.checks import _keras_check, keras_setup

    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax", "floatx": "float32"}))
    assert keras_setup({"KERAS_HOME": str(tmp_path)})["backend_from"] == str(tmp_path / "keras.json")
    assert keras_setup({"KERAS_HOME": str(tmp_path), "KERAS_BACKEND": "torch"})["backend"] == "torch"
    default = keras_setup({"KERAS_HOME": str(tmp_path / "none")})
    assert (default["backend"], default["backend_from"]) == ("tensorflow", "Keras' default")
    assert default["version"].startswith("3.")  # the suite's Keras, read from its metadata
    wants_jax = {"version": "3.15.1", "backend": "jax", "backend_from": "KERAS_BACKEND"}
    assert _keras_check(wants_jax, [Backend.jax]).status == "ok"
    missing = _keras_check(wants_jax, [Backend.tensorflow])
    assert missing.status == "fail" and missing.fix == "pip install 'gpuscout[jax]', or export KERAS_BACKEND=tensorflow"
    assert _keras_check({**wants_jax, "backend": "torch"}, [Backend.jax]).status == "warn"
    assert _keras_check({**wants_jax, "version": None}, []).message == "Keras is not installed"
    assert _keras_check({**wants_jax, "version": "2.15.0"}, [Backend.jax]).status == "fail"
