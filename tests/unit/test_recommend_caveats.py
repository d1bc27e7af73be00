"""recommend says when its ranking does not mean what it seems to (recommend/caveats.py, issue 62
item 2), on jobs and rows made by hand: a CPU run of a small dense model capped by its input gets
all four sentences; a GPU-bound job with published figures gets none."""

from gpuscout import catalog
from gpuscout.catalog import predict
from gpuscout.core.spec import Precision
from gpuscout.recommend.caveats import cannot_judge, caveats
from gpuscout.recommend.jobs import Job
from gpuscout.recommend.measured import MeasuredRun, Split
from gpuscout.recommend.ranking import MeasuredPrediction, Row
from gpuscout.record.run import HourlyCost

CATALOG = catalog.load()
ASSUMED = predict.assumed_reference("transformer", 1e6, CATALOG, Precision.fp32).label.removeprefix("assumed: ")


def job(params: float, flops_per_sample: float, on_gpu: str | None) -> Job:
    gpu = CATALOG.get(on_gpu) if on_gpu else None
    run = MeasuredRun(
        "run1", "watch", gpu, gpu.name if gpu else "cpu", 1, 3000.0, 2900.0, 3100.0,
        Split(0.9, 0.09, 0.01, "by hand"), flops_per_sample,
    )  # fmt: skip
    return Job(
        name="train.py (run run1)",
        unit="samples",
        units_per_sample=1,
        training_flops_per_unit=flops_per_sample,
        intensity=10.0,
        fixed_bytes=16 * params,
        per_sample_bytes=100.0,
        memory_basis="by hand",
        batch_size=64,
        precision=Precision.fp32,
        kind="transformer",
        dataset_units=64_000,
        measured=run,
    )


def row(gpu: str, samples_per_s: float, usd_per_hour: float | None, cap: float | None, refs: tuple) -> Row:
    spec = CATALOG.get(gpu)
    hourly = HourlyCost(usd_per_hour=usd_per_hour, basis="by hand", kind="cloud") if usd_per_hour else None
    return Row(
        spec, 1, True, 1e6,
        MeasuredPrediction(samples_per_s, samples_per_s * 0.7, samples_per_s * 1.3, "predicted", refs, input_cap=cap),
        1.0, usd_per_hour, hourly, None, True, [],
    )  # fmt: skip


def test_a_cpu_run_of_a_small_dense_model_capped_by_its_input_gets_every_caveat():
    """An MLP of 20,000 parameters (6 training FLOPs per parameter a sample), measured on the CPU,
    its input and host capping it at 30,000 samples/s: every GPU reaches 27,000 or more."""
    mlp = job(20_000, 6 * 20_000, None)
    rows = [
        row("h100_sxm", 29_900.0, 2.99, 30_000.0, (ASSUMED,)),
        row("t4", 27_200.0, 0.53, 30_000.0, (ASSUMED,)),
        row("l4", 28_000.0, 0.71, 30_000.0, (ASSUMED,)),
    ]
    said = caveats(mlp, rows)
    assert [s.split(" ")[0] for s in said] == ["Any", "Predicted", "A"]
    # said before the answer (issue 75): it cannot judge a GPU, and its figures are to two digits
    assert cannot_judge(mlp) == (
        "Run run1 ran on the CPU: it cannot say how fast a GPU trains this. Every GPU figure below is "
        "predicted from the model's FLOPs and this host's input and loop time (+-50%), given to two digits; "
        "watch it on a GPU to measure it."
    )
    # the cheapest by the hour, not the ranking's first; the cap at the precision it has
    assert "cap this training at about 30,000 samples/s" in said[0]
    assert "Take the cheapest (1x T4, 0.53 USD/h)" in said[0]
    assert "a dense network (6 training FLOPs per parameter a sample" in said[1] and "35% MFU" in said[1]
    # 16 B x 20,000 + 100 B x 64 = 326,400 B of a T4's 16 GB
    assert said[2].startswith("A small job (0.3 MB of GPU memory")


def test_a_gpu_bound_job_measured_on_a_gpu_gets_none():
    """ResNet-50-like: 25.6M parameters, 24.6 GFLOP a sample for training, measured on an H100; a
    B200 twice as fast as the cap allows the T4: the GPU sets the pace."""
    resnet = job(25.6e6, 24.6e9, "h100_sxm")
    rows = [
        row("h100_sxm", 3000.0, 2.99, 20_000.0, ("measured: run run1",)),
        row("t4", 450.0, 0.53, 20_000.0, ("1.00x the H100's GPU part",)),
    ]
    assert caveats(resnet, rows) == [] and cannot_judge(resnet) is None


def test_another_kind_of_model_s_efficiency_is_named_with_its_error():
    """A convnet-like model (960 FLOPs per parameter) predicted at a transformer's MFU: said, with
    the band of a prediction on no reference, not the dense-network warning."""
    conv = job(25.6e6, 960 * 25.6e6, "h100_sxm")
    said = caveats(conv, [row("t4", 450.0, 0.53, None, (ASSUMED,))])
    assert said == [
        f"Predicted at {ASSUMED}, another kind of model's efficiency (+-50%): watch it on one GPU to measure it."
    ]
