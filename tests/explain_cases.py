"""Error logs and what `doctor --explain` must find in each (the unit and CLI tests of explain/)."""

from __future__ import annotations

# (the exact message, as the cited public report shows it; the class; words the cause and the
# fix must hold on the fake machine)
CASES = [
    (
        "2023-06-13 W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load dynamic library "
        "'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file: No such file or directory",
        "library_missing",
        ["libcudnn.so.8"],
        ["nvidia-cudnn-cu12", "tensorflow[and-cuda]==2.18.0", "cuDNN 8"],
    ),
    (
        "2023-07-16 21:25:08.942423: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1960] Cannot dlopen some GPU "
        "libraries. Please make sure the missing libraries mentioned above are installed properly if you would like "
        "to use GPU.",
        "gpu_libraries_skipped",
        ["CPU"],
        ["tensorflow 2.18.0 (CUDA 12.5.1, cuDNN 9)"],
    ),
    (
        "E0000 00:00:1738697930.202924    7665 cuda_dnn.cc:522] Loaded runtime CuDNN library: 9.1.0 but source was "
        "compiled with: 9.3.0.  CuDNN library needs to have matching major version and equal or higher minor version.",
        "cudnn_version_mismatch",
        ["9.1.0", "9.3.0"],
        ["needs cuDNN 9.3.0 or a newer 9.x", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "tensorflow[and-cuda]==2.18.0"],
    ),
    (
        "2025-02-04 20:38:50.230519: W tensorflow/core/framework/op_kernel.cc:1841] OP_REQUIRES failed at "
        "xla_ops.cc:577 : FAILED_PRECONDITION: DNN library initialization failed. Look at the errors above for more "
        "details.",
        "dnn_unavailable",
        ["cuDNN"],
        ["TF_FORCE_GPU_ALLOW_GROWTH"],
    ),
    (
        "tensorflow.python.framework.errors_impl.InternalError: cudaGetDevice() failed. Status: CUDA driver version is "
        "insufficient for CUDA runtime version",
        "driver_too_old",
        [],
        ["driver 535.183.01 supports CUDA up to 12.2", "needs CUDA 12.5.1", "upgrade the NVIDIA driver"],
    ),
    (
        "WARNING:2025-05-28 18:06:26,600:jax._src.xla_bridge:791: An NVIDIA GPU may be present on this machine, but a "
        "CUDA-enabled jaxlib is not installed. Falling back to cpu.",
        "jax_cpu_only",
        ["CPU"],
        ["supports CUDA up to 12.2", "jax[cuda12]==0.4.38"],
    ),
    (
        "I0716 21:25:08.991377 140319043823424 xla_bridge.py:603] Unable to initialize backend 'cuda': "
        "FAILED_PRECONDITION: No visible GPU devices.",
        "jax_cuda_backend",
        ["No visible GPU devices"],
        ["jax[cuda12]"],
    ),
    (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[3,3,512,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
        "[Op:Mul]",
        "gpu_oom_tensorflow",
        ["shape [3,3,512,1024]"],
        # 3*3*512*1024 float32 = 18,874,368 bytes = 0.02 GiB
        [
            "the allocation that failed: 0.02 GiB",
            "has 40.00 GiB",
            "other processes hold 10.00 GiB",
            "4242",
            "TF_FORCE_GPU_ALLOW_GROWTH=true",
        ],
    ),
    (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 "
        "bytes.",
        "gpu_oom_xla",
        ["4770354232 bytes"],
        ["the allocation that failed: 4.44 GiB", "XLA_PYTHON_CLIENT_PREALLOCATE"],
    ),
    (
        "E1103 18:23:55.103160 3413767 gpu_cudamallocasync_allocator.cc:361] gpu_async_1 cuMemAllocAsync failed to "
        "allocate 1225195446464 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        "cuda_oom",
        [],
        ["the allocation that failed: 1141.05 GiB"],
    ),
    (
        "F0729 12:58:37.236422     109 stream_executor_util.cc:504] Could not create RepeatBufferKernel: INTERNAL: "
        "Failed call to cudaGetFuncBySymbol: no kernel image is available for execution on the device",
        "no_kernel_image",
        [],
        ["compute capability 8.0 (sm_80)", "does not report the architectures"],
    ),
    (
        "NotFoundError: 2 root error(s) found.  (0) Not found: ./bin/ptxas not found",
        "ptxas_missing",
        [],
        ["nvidia-cuda-nvcc-cu12", "compute capability 8.0", "--xla_gpu_cuda_data_dir"],
    ),
    (
        "2023-09-26 23:49:25.317379: W external/xla/xla/stream_executor/gpu/asm_compiler.cc:231] Falling back to the "
        "CUDA driver for PTX compilation; ptxas does not support CC 9.0",
        "ptxas_too_old",
        [],
        ["nvidia-cuda-nvcc-cu12"],
    ),
    (
        "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:305: NCCL operation ncclCommInitRank(&comm, nranks, id, "
        "rank) failed: unhandled system error (run with NCCL_DEBUG=INFO for details).",
        "nccl_system_error",
        ["/dev/shm"],
        ["NCCL_DEBUG=INFO", "--shm-size", "over 1 GPUs"],
    ),
    (
        "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:275: NCCL operation ncclCommInitRank(&comm, nranks, id, "
        "rank) failed: unhandled cuda error",
        "nccl_cuda_error",
        [],
        ["out-of-memory or driver message"],
    ),
    # issue 29: the loader's error names another library than the one asked for: that one is missing
    (
        "2022-07-15 W tensorflow/tsl/platform/default/dso_loader.cc:66] Could not load dynamic library "
        "'libcusolver.so.11'; dlerror: libcublasLt.so.11: cannot open shared object file: No such file or directory",
        "library_dependency_missing",
        ["libcusolver.so.11 was found", "libcublasLt.so.11 is the missing one"],
        ["libcublasLt.so.11 comes with the pip package nvidia-cublas-cu12"],
    ),
    (
        "Could not load library libcudnn_ops_infer.so.8. Error: libcublas.so.11: cannot open shared object file: "
        "No such file or directory",
        "library_dependency_missing",
        ["needs libcublas.so.11"],
        ["nvidia-cublas-cu12"],
    ),
    (
        "Exception: URL fetch failure on https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz: None "
        "-- [Errno -3] Temporary failure in name resolution",
        "download_failed",
        ["Temporary failure in name resolution", "no network"],
        [
            "~/.keras/datasets/mnist.npz",
            "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz",
            "HTTPS_PROXY",
        ],
    ),
    (
        "2023-04-15 F external/xla/xla/parse_flags_from_env.cc:226] Unknown flags in XLA_FLAGS: "
        "--xla_tpu_spmd_rng_bit_generator_unsafe=1 ",
        "xla_flag_unknown",
        ["--xla_tpu_spmd_rng_bit_generator_unsafe=1"],
        ["take --xla_tpu_spmd_rng_bit_generator_unsafe=1 out of XLA_FLAGS", "LIBTPU_INIT_ARGS"],
    ),
    # issue 78: the script's own mistakes, each line as Keras 3.15 printed it here (tests/fixtures/explain/
    # keras_errors.py makes them; a slow test makes them again with the installed Keras), and two public logs
    (
        "ValueError: Arguments `target` and `output` must have the same shape. Received: target.shape=(32,), "
        "output.shape=(32, 10)",
        "loss_integer_labels",
        ["labels of shape (32,) with outputs of shape (32, 10)"],
        ["loss='sparse_categorical_crossentropy'", "keras.utils.to_categorical(y, 10)"],
    ),
    (
        "ValueError: Argument `output` must have rank (ndim) `target.ndim - 1`. Received: target.shape=(32, 10), "
        "output.shape=(32, 10)",
        "loss_one_hot_labels",
        ["labels of shape (32, 10)"],
        ["loss='categorical_crossentropy'", "y.argmax(axis=-1)"],
    ),
    (
        "Received a label value of 10 which is outside the valid range of [0, 10).  Label values: 10 10 10",
        "label_out_of_range",
        ["a label of 10 reached a loss over 10 classes"],
        ["y - 1", "11 units", "NaN loss"],
    ),
    (
        'Invalid input shape for input Tensor("data:0", shape=(32, 28, 28), dtype=float32) with name '
        "'keras_tensor_6' and path ''. Expected shape (None, 784), but input has incompatible shape (32, 28, 28)",
        "input_shape_mismatch",
        ["(None, 784)", "(32, 28, 28)"],
        ["keras.layers.Flatten()", "x.reshape(len(x), 784)"],
    ),
    (
        "ValueError: Data cardinality is ambiguous. Make sure all arrays contain the same number of samples.'x' "
        "sizes: 64",
        "data_cardinality",
        ["different lengths"],
        ["len(x) == len(y)"],
    ),
    (
        "ValueError: Failed to convert a NumPy array to a Tensor (Unsupported object type float).",
        "object_array",
        ["dtype object"],
        ["astype('float32')"],
    ),
    (
        "/x/keras/src/trainers/epoch_iterator.py:164: UserWarning: Your input ran out of data; interrupting "
        "training. Make sure that your dataset or generator can generate at least `steps_per_epoch * epochs` batches.",
        "ran_out_of_data",
        ["stopped early"],
        ["dataset.repeat()", "steps_per_epoch"],
    ),
    (
        "ValueError: Could not interpret loss identifier: sparse_categorical_crosentropy",
        "unknown_identifier",
        ["'sparse_categorical_crosentropy'"],
        ["spell it 'sparse_categorical_crossentropy'"],
    ),
    (
        "ValueError: You must call `compile()` before using the model.",
        "not_compiled",
        ["never compiled"],
        ["model.compile(optimizer='adam'"],
    ),
    (
        "ValueError: Invalid filepath extension for saving. Please add either a `.keras` extension for the native "
        "Keras format (recommended) or a `.h5` extension. Use `model.export(filepath)` if you want to export a "
        "SavedModel for use with TFLite/TFServing/etc. Received: filepath=out/model.",
        "save_path_extension",
        ["out/model"],
        ["model.save('out/model.keras')", "model.export('out/model')", "model.weights.h5"],
    ),
    (
        "ValueError: File format not supported: filepath=saved/cnn. Keras 3 only supports V3 `.keras` files and "
        "legacy H5 format files (`.h5` extension).",
        "load_saved_model_folder",
        ["saved/cnn"],
        ["keras.layers.TFSMLayer('saved/cnn', call_endpoint='serving_default')", "tf_keras"],
    ),
    (
        "TypeError: Could not locate class 'Scale'. Make sure custom classes and functions are decorated with "
        "`@keras.saving.register_keras_serializable()`.",
        "custom_object_unknown",
        ["custom class Scale"],
        ["@keras.saving.register_keras_serializable()", "custom_objects={'Scale': Scale}"],
    ),
    (
        "ValueError: Unknown variable: <Variable path=sequential_11/dense_18/kernel, shape=(8, 10), dtype=float32>. "
        "This optimizer can only be called for the variables it was originally built with. When working with a "
        "new set of variables, you should recreate a new optimizer instance.",
        "optimizer_reused",
        ["the same object was given to another model"],
        ["its own optimizer"],
    ),
    (
        "ValueError: You tried to call `count_params` on layer 'net', but the layer isn't built. You can build it "
        "manually via: `layer.build(input_shape)`.",
        "model_not_built",
        ["first call"],
        ["keras.Input(shape=...)", "model(x[:1])"],
    ),
    (
        "ValueError: A KerasTensor cannot be used as input to a TensorFlow function. A KerasTensor is a symbolic "
        "placeholder for a shape and dtype, used when constructing Keras Functional models or Keras Functions.",
        "keras_tensor_in_tf_function",
        ["keras.Input's symbolic tensor"],
        ["keras.ops.sum for tf.reduce_sum", "keras.layers.Layer"],
    ),
    (
        "jax.errors.TracerBoolConversionError: Attempted boolean conversion of traced array with shape bool[].",
        "jax_tracer_value",
        ["TracerBoolConversionError"],
        ["keras.ops.where", "run_eagerly=True"],
    ),
    (
        "/usr/lib/python3.11/multiprocessing/popen_fork.py:66: RuntimeWarning: os.fork() was called. os.fork() is "
        "incompatible with multithreaded code, and JAX is multithreaded, so this will likely lead to a deadlock.",
        "fork_after_jax",
        ["use_multiprocessing=True"],
        ["use_multiprocessing=False", "get_context('spawn')", "process_workers"],
    ),
    (
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:",
        "graph_execution_error",
        ["Detected at node"],
        ["run_eagerly=True"],
    ),
    (
        "2020-11-11 10:46:37.467224: E tensorflow/stream_executor/cuda/cuda_driver.cc:314] failed call to cuInit: "
        "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        "cuda_init_failed",
        ["CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"],
        ["NVML sees 1 GPU(s)", "docker run --gpus all"],
    ),
    (
        "2024-05-10 11:33:15.185131: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: "
        "Could not find TensorRT",
        "tensorrt_not_found",
        ["never need it"],
        ["nothing to fix for training", "TF_CPP_MIN_LOG_LEVEL=2"],
    ),
    (
        "Detected unsupported operations when trying to compile graph __inference_one_step_on_data_527[] on "
        "XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel for XLA_CPU_JIT devices compatible with node "
        "{{node sequential_1/numpy_1/PyFunc}}){{node sequential_1/numpy_1/PyFunc}}",
        "xla_unsupported_op",
        ["holds PyFunc", "on the CPU"],
        ["jit_compile=False", "dataset.map"],
    ),
    (
        "/x/keras/src/trainers/data_adapters/py_dataset_adapter.py:121: UserWarning: Your `PyDataset` class should "
        "call `super().__init__(**kwargs)` in its constructor. `**kwargs` can include `workers`, "
        "`use_multiprocessing`, `max_queue_size`. Do not pass these arguments to `fit()`, as they will be ignored.",
        "pydataset_super_not_called",
        ["one thread"],
        ["super().__init__(**kwargs)", "fit(workers=...) does nothing"],
    ),
    (
        "ValueError: None values not supported.",
        "labels_missing",
        ["the labels"],
        ["(inputs, labels)"],
    ),
]
