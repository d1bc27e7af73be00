"""Validated inputs of a benchmark run.

A ``RunSpec`` is everything the child process needs to measure one run. It is built and
validated in the parent (bad input stops here, exit 2, nothing run), serialised to JSON and read
back by the child.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuscout.core.errors import UsageError


class Backend(str, Enum):
    tensorflow = "tensorflow"
    jax = "jax"


# bf16 tensor cores arrived with Ampere (CUDA C++ Programming Guide, "Compute Capabilities").
BF16_COMPUTE_CAPABILITY = 8.0


class Precision(str, Enum):
    fp32 = "fp32"
    mixed_float16 = "mixed_float16"
    mixed_bfloat16 = "mixed_bfloat16"

    @property
    def keras_policy(self) -> str:
        return "float32" if self is Precision.fp32 else self.value


class DataMode(str, Enum):
    synthetic = "synthetic"  # a few random batches resident on the device, rotated
    pipeline = "pipeline"  # the tuned host pipeline: parallel map, cache, prefetch (tf.data guide)
    naive = "naive"  # the same work on one thread, batch by batch, nothing prefetched


class Distribution(str, Enum):
    """How a run spreads training over devices (scale.py; docs/methodology.md, "Scaling")."""

    single = "single"  # one device, no strategy: what `bench` measures
    # Data parallel over this host's `devices`: tf.distribute.MirroredStrategy (NCCL all-reduce on
    # GPUs) on tensorflow, keras.distribution.DataParallel on jax. Also with one device, so that
    # a scaling study's one-GPU point runs the same code as its N-GPU points.
    mirrored = "mirrored"
    # tf.distribute.MultiWorkerMirroredStrategy across processes/hosts; the cluster and this
    # process's place in it come from TF_CONFIG in the environment (cluster.py).
    multi_worker = "multi_worker"


class BatchNormStats(str, Enum):
    """Over which samples a data-parallel run's BatchNormalization layers compute their statistics
    (docs/methodology.md, "Batch norm over several devices")."""

    # Each device over its own shard; only gradients (and, averaged, the moving statistics) are
    # all-reduced: what tf.distribute.MirroredStrategy and PyTorch DDP do.
    per_replica = "per_replica"
    # Over the global batch: small all-reduces inside every BN layer, forward and backward. What
    # keras.distribution.DataParallel does on jax; BatchNormalization(synchronized=True) on tensorflow.
    global_ = "global"


class Task(str, Enum):
    measure = "measure"  # the timing protocol (measure/protocol.py)
    inspect = "inspect"  # load a user's model, describe it, one CPU step (workloads/user.py)
    to_accuracy = "to_accuracy"  # train on real data until a validation accuracy (measure/accuracy.py)
    pipeline = "pipeline"  # an input pipeline alone, no model (measure/pipeline.py)
    infer = "infer"  # inference latency and throughput in a deployment format (measure/inference.py)


class ServeFormat(str, Enum):
    """What an inference run executes (measure/inference.py, measure/formats.py)."""

    keras = "keras"  # the Keras model, its forward pass compiled by the backend (XLA on jax)
    saved_model = "saved_model"  # model.export(format="tf_saved_model"), loaded with tf.saved_model.load
    litert = "litert"  # converted from the SavedModel with the LiteRT (TFLite) converter, run on the CPU
    onnx = "onnx"  # model.export(format="onnx"), run by ONNX Runtime (CUDA provider on a GPU)
    tensorrt = "tensorrt"  # the ONNX export run by ONNX Runtime's TensorRT execution provider


# LiteRT variants: the converter's float32, float16 weights, dynamic-range int8 weights, and full
# int8 (weights and activations, calibrated on a representative dataset). LiteRT documentation,
# "Post-training quantization".
LITERT_VARIANTS = ("fp32", "fp16", "int8_dynamic", "int8")


class Inference(BaseModel):
    """An inference run: every batch size in one child, one format (and variant)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_sizes: tuple[int, ...]
    format: ServeFormat = ServeFormat.keras
    variant: str = "fp32"  # litert: one of LITERT_VARIANTS; other formats: the precision
    requests: int = Field(default=200, ge=5, le=1_000_000)  # timed requests per batch size
    warmup_requests: int = Field(default=20, ge=1, le=100_000)
    concurrency: int = Field(default=0, ge=0, le=256)  # closed-loop clients of the load test (0: none)
    load_seconds: float = Field(default=5.0, gt=0, le=3600)
    dataset: str | None = None  # real labelled data: accuracy of this format next to fp32 Keras


class ModelRef(BaseModel):
    """A user's model: `file.py:function` or a saved `.keras` file (workloads/user.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str  # absolute
    function: str | None = None  # .py files: the function that builds the model
    sha256: str  # of the file, for provenance
    input_shape: tuple[int, ...] | None = None  # --input-shape, per sample


class ModelInfo(BaseModel):
    """What the inspection child found out about a user's model; the parent's workload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    input_shape: tuple[int, ...]
    input_dtype: str
    label_shape: tuple[int, ...]
    label_kind: (
        str  # sparse: class ids; onehot; binary: 0/1; distribution; positive; dense: float (child/user_model.py)
    )
    num_classes: int | None
    vocab_size: int | None  # integer inputs: ids drawn below this
    params: int
    compute_dtype: str  # of the layer holding the most weights: shows the precision policy took
    forward_flops: float
    flops_source: str  # "given" by the user or "counted" (workloads/flops.py)
    flops_coverage: float | None  # counted: the counted share of the FLOPs (at most; child/flops.py)
    default_batch_size: int


class ToAccuracy(BaseModel):
    """Train on real data until a validation accuracy is reached (measure/accuracy.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: float = Field(gt=0.0, le=1.0)
    dataset: str  # a name in datasets.py or a path
    max_epochs: int = Field(default=30, ge=1, le=10_000)


class Protocol(BaseModel):
    """The measurement protocol's settings (docs/methodology.md, "One run"), with their defaults:
    the first step (compilation) timed apart, then `warmup_steps` steps discarded, then `windows`
    timing windows of at least `window_steps` steps and `window_seconds` seconds. RunSpec carries
    them; every verb and CLI option takes its defaults from here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup_steps: int = Field(default=10, ge=0, le=100_000)
    windows: int = Field(default=5, ge=1, le=1000)
    window_steps: int = Field(default=10, ge=1, le=1_000_000)
    window_seconds: float = Field(default=2.0, ge=0.0, le=3600.0)


PROTOCOL = Protocol()


class RunSpec(Protocol):
    """One benchmark run, as the child process receives it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    backend: Backend
    precision: Precision = Precision.fp32
    xla: bool = True
    # Samples per training step on this run's devices: the global batch of a one-host run, this
    # worker's share in a multi-worker run. Split evenly over `devices`.
    batch_size: int = Field(ge=1, le=1_000_000)
    seq_len: int | None = Field(default=None, ge=1, le=1_000_000)  # token workloads only
    data: DataMode = DataMode.synthetic
    # pipeline mode: how many times the per-sample augmentation is applied (host cost knob)
    pipeline_cost: int = Field(default=1, ge=1, le=1000)
    # pipeline mode: parallel calls of the map (None: tf.data.AUTOTUNE); 1 measures one core
    pipeline_threads: int | None = Field(default=None, ge=1, le=1024)
    user_pipeline: str | None = None  # Task.pipeline: "file.py:function" returning a tf.data.Dataset
    seed: int = Field(default=0, ge=0, le=2**32 - 1)  # what numpy, TensorFlow and jax all take
    # None = CPU run; otherwise the physical GPU index (NVML and CUDA order, see executor)
    gpu_index: int | None = Field(default=None, ge=0)
    # Several local devices (distribution mirrored/multi_worker): the physical GPU indices, the
    # first being gpu_index; on a CPU run, `devices` logical CPU devices split from the host CPU.
    gpu_indices: tuple[int, ...] | None = None
    devices: int = Field(default=1, ge=1, le=64)
    distribution: Distribution = Distribution.single
    # Runs over several devices only (None on one: there the batch is the replica's). None on such
    # a run means a record written before gpuscout chose: see `batchnorm_stats`.
    batchnorm: BatchNormStats | None = None
    task: Task = Task.measure
    # A folder of XLA programs kept across runs (jax's persistent compilation cache): the trials
    # of a sweep share one, so a program any of them compiled is loaded, not compiled again.
    # None: every program compiled afresh (bench's default, so compile_s is a cold compile).
    compilation_cache: str | None = None
    model: ModelRef | None = None  # a user's model instead of a registered workload
    model_info: ModelInfo | None = None  # filled in by the inspection run
    to_accuracy: ToAccuracy | None = None
    inference: Inference | None = None

    @model_validator(mode="after")
    def _jax_always_compiles(self) -> RunSpec:
        if self.backend is Backend.jax and not self.xla:
            raise ValueError("the jax backend always compiles with XLA: drop --no-xla or use --backend tensorflow")
        return self

    @model_validator(mode="after")
    def _devices_agree(self) -> RunSpec:
        if self.devices > 1 and self.distribution is Distribution.single:
            raise ValueError(f"{self.devices} devices need a distribution (mirrored or multi_worker)")
        if self.gpu_indices is not None:
            if len(self.gpu_indices) != self.devices or self.gpu_index != self.gpu_indices[0]:
                raise ValueError("gpu_indices must list `devices` GPUs, the first being gpu_index")
            if len(set(self.gpu_indices)) != len(self.gpu_indices):
                raise ValueError(f"a GPU is listed twice in {list(self.gpu_indices)}")
        elif self.gpu_index is not None and self.devices > 1:
            raise ValueError("a run on several GPUs lists them in gpu_indices")
        if self.batch_size % self.devices:
            raise ValueError(f"batch {self.batch_size} does not split evenly over {self.devices} devices")
        if self.distribution is not Distribution.single and self.backend is Backend.tensorflow and self.xla:
            # Keras turns XLA off under tf.distribute (keras/src/trainers/trainer.py,
            # _resolve_auto_jit_compile: "Disable XLA with tf.distribute"): the optimizer's
            # cross-replica update cannot live inside one XLA cluster.
            raise ValueError("Keras trains tf.distribute strategies without XLA: drop --xla, or use --backend jax")
        if self.batchnorm is not None and self.distribution is Distribution.single:
            raise ValueError("batch-norm statistics are chosen for runs over several devices (gpuscout scale)")
        if self.compilation_cache is not None and self.backend is not Backend.jax:
            raise ValueError("the compilation cache is jax's: TensorFlow runs compile afresh")
        if self.distribution is Distribution.multi_worker and self.backend is not Backend.tensorflow:
            raise ValueError("multi-worker runs use tf.distribute.MultiWorkerMirroredStrategy: --backend tensorflow")
        return self

    @property
    def gpus(self) -> tuple[int, ...]:
        """The physical GPUs this run trains on (empty on the CPU)."""
        if self.gpu_index is None:
            return ()
        return self.gpu_indices or (self.gpu_index,)

    @property
    def batchnorm_stats(self) -> BatchNormStats | None:
        """The batch-norm semantics this run trains (trained) with; None on one device. Records
        from before the field existed: jax ran keras.distribution.DataParallel (global statistics),
        tensorflow MirroredStrategy (per replica)."""
        if self.distribution is Distribution.single or (
            self.distribution is Distribution.mirrored and self.devices == 1
        ):
            return None  # one replica: its batch is the whole batch
        if self.batchnorm is not None:
            return self.batchnorm
        return BatchNormStats.global_ if self.backend is Backend.jax else BatchNormStats.per_replica

    @property
    def per_device_batch_size(self) -> int:
        return self.batch_size // self.devices

    @property
    def device_kind(self) -> str:
        return "cpu" if self.gpu_index is None else "gpu"


def build_spec(**fields) -> RunSpec:
    """Build a RunSpec, turning pydantic's report into one line that names the bad field."""
    try:
        return RunSpec(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        message = first["msg"].removeprefix("Value error, ")
        raise UsageError(
            f"invalid {where}: {message} (got {first.get('input')!r})" if first["loc"] else message
        ) from None
