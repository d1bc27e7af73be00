"""recommend --from RUN: the bottleneck-split prediction, the training's time and cost, and a
sweep's, each against a hand computation (issue 32)."""

import json
import math
from pathlib import Path

import pytest

from gpuscout import catalog
from gpuscout.analysis import scaling
from gpuscout.catalog import Catalog, PriceEntry
from gpuscout.catalog.pricing import PricingOptions
from gpuscout.core.errors import UsageError
from gpuscout.recommend import from_run, measured, sweep_cost
from gpuscout.recommend.ranking import Constraints
from gpuscout.record.trial import StoredTrial, TrialOutcome
from gpuscout.record.watch import WatchRecord
from tests.records import make_record, make_watch_record

FIXTURE = Path(__file__).parents[1] / "fixtures" / "recommend" / "h100_watch.json"
H100 = catalog.load().get("h100_sxm")
# Twice an H100 in compute and bandwidth: the GPU part runs exactly 2x faster, whatever the intensity
DOUBLE = H100.model_copy(
    update={
        "id": "h100_double",
        "name": "Double H100",
        "nvml_patterns": ["Double H100"],
        "bf16_tflops": 2 * H100.bf16_tflops,
        "tf32_tflops": 2 * H100.tf32_tflops,
        "fp16_tflops": 2 * H100.fp16_tflops,
        "fp32_tflops": 2 * H100.fp32_tflops,
        "memory_bandwidth_gbs": 2 * H100.memory_bandwidth_gbs,
        "bf16_sparse_tflops": None,
        "fp16_sparse_tflops": None,
        "tf32_sparse_tflops": None,
    }
)
USD_PER_H = 10.0
CAT = Catalog(
    gpus=(H100, DOUBLE),
    prices=(
        PriceEntry(
            gpu="h100_double",
            kind="cloud",
            provider="test",
            usd=USD_PER_H,
            date="2026-11",
            source="a price for the test's made-up GPU",
        ),
    ),
    user_file=None,
)


def fixture_runs() -> dict[str, WatchRecord]:
    runs = [WatchRecord(**r) for r in json.loads(FIXTURE.read_text())["runs"]]
    return {r.command[-1]: r for r in runs}  # gpu, input, host


def with_split(record: WatchRecord, samples_per_s: float, gpu: float, input_wait: float) -> WatchRecord:
    """The record with its figures set: `gpu` busy share (NVML), `input_wait`, nothing between steps."""
    telemetry = record.telemetry.model_copy(update={"gpu_util_mean_pct": 100 * gpu})
    return record.model_copy(
        update={
            "windows_samples_per_s": samples_per_s,  # the steps alone: what the split is of
            "input_wait_share": input_wait,
            "outside_step_share": 0.0,
            "telemetry": telemetry,
        }
    )


def test_a_run_waiting_40_percent_for_input_gets_1_43x_from_a_gpu_twice_as_fast_not_2x():
    record = with_split(fixture_runs()["gpu"], 1000.0, gpu=0.6, input_wait=0.4)
    m = from_run.measured_run(record, CAT)
    assert (m.split.gpu_share, m.split.input_share, m.split.host_share) == pytest.approx((0.6, 0.4, 0.0))
    p = measured.predict_run(m, DOUBLE, record_precision(record), 900.0, CAT, "transformer")
    assert p.samples_per_s == pytest.approx(1000 / (0.4 + 0.6 / 2))  # 1,428.6: 1.43x
    assert p.samples_per_s / 1000 == pytest.approx(1.4286, abs=1e-4)
    assert p.input_cap == pytest.approx(1000 / 0.4)  # the GPU infinitely fast: 2,500
    assert p.basis == "predicted" and p.low < p.samples_per_s < p.high
    same = measured.predict_run(m, H100, record_precision(record), 900.0, CAT, "transformer")
    assert same.basis == "measured" and same.samples_per_s == 1000.0


def test_the_band_widens_with_the_share_that_stays_on_the_host():
    base = fixture_runs()["gpu"]
    bands = []
    for waiting in (0.0, 0.5, 0.9):
        record = with_split(base, 1000.0, gpu=1 - waiting, input_wait=waiting)
        p = measured.predict_run(
            from_run.measured_run(record, CAT), DOUBLE, record_precision(record), 900.0, CAT, "transformer"
        )
        bands.append((p.high - p.low) / p.samples_per_s)
    # all on the GPU: the predictor's own band, +-30% of the GPU part
    assert bands[0] == pytest.approx(1.3 - 0.7, rel=1e-6)
    # all on the host: +-20% of a host's time, a narrower band around a number that barely moves
    record = with_split(base, 1000.0, gpu=0.0, input_wait=1.0)
    p = measured.predict_run(
        from_run.measured_run(record, CAT), DOUBLE, record_precision(record), 900.0, CAT, "transformer"
    )
    assert p.samples_per_s == pytest.approx(1000.0)
    assert (p.low, p.high) == pytest.approx(
        (1000 * (1 - measured.HOST_VARIATION), 1000 * (1 + measured.HOST_VARIATION))
    )


def test_the_whole_training_and_its_cost_from_fits_own_plan():
    record = with_split(fixture_runs()["gpu"], 1000.0, gpu=0.6, input_wait=0.4)
    answer = from_run.recommendation(record, CAT, Constraints(max_gpus=1), PricingOptions())
    main = record.main
    assert answer.epochs == main.epochs_planned == 1000
    samples = main.epochs_planned * main.steps_per_epoch * main.batch_size  # 1000 x 64 x 32
    row = next(r for r in answer.rows if r.gpu.id == "h100_double")
    m = answer.measured
    speed = 1000 / (0.4 + 0.6 / 2)
    seconds = samples / speed + 1000 * m.epoch_overhead_s * (1000 / speed) + m.startup_s
    assert row.hours == pytest.approx(seconds / 3600)
    assert row.cost_usd == pytest.approx(USD_PER_H * seconds / 3600)
    # --dataset-size and --epochs replace the plan
    other = from_run.recommendation(record, CAT, Constraints(max_gpus=1), PricingOptions(), dataset_size=6400, epochs=3)
    row = next(r for r in other.rows if r.gpu.id == "h100_double")
    assert row.hours == pytest.approx((3 * 6400 / speed + 3 * m.epoch_overhead_s * 1000 / speed + m.startup_s) / 3600)


def test_more_gpus_divide_the_gpu_part_only():
    record = with_split(fixture_runs()["gpu"], 1000.0, gpu=0.6, input_wait=0.4)
    m = from_run.measured_run(record, CAT)
    p = measured.predict_run(m, DOUBLE, record_precision(record), 900.0, CAT, "transformer", gpus=4, efficiency=0.9)
    assert p.samples_per_s == pytest.approx(1000 / (0.4 + 0.6 / 2 / (4 * 0.9)))


def test_a_sweeps_wall_time_is_rounds_of_trials_and_its_cost_the_gpus_hours():
    # 9 trials of 2 h on 2 GPUs, one at a time per GPU: ceil(9/2) = 5 rounds
    assert sweep_cost.rounds_wall_h(9, 2, 1, 2.0, gpu_share=1.0) == (10.0, 2.0)
    # a GPU-bound trial gains nothing from sharing: 2 at once take twice as long each
    assert sweep_cost.rounds_wall_h(9, 2, 2, 2.0, gpu_share=1.0) == (math.ceil(9 / 4) * 4.0, 4.0)
    # a trial busy on its GPU a quarter of the time: four share one GPU at no cost
    assert sweep_cost.rounds_wall_h(9, 2, 4, 2.0, gpu_share=0.25) == (math.ceil(9 / 8) * 2.0, 2.0)
    # three per GPU finish 9 trials in two rounds as four do: the fewer sharing, the better
    assert sweep_cost.placement(9, 2, 4, 2.0, 0.25) == ((4.0, 2.0), 3)
    assert sweep_cost.placement(9, 2, 4, 2.0, 1.0) == ((10.0, 2.0), 1)  # sharing saves nothing: one each
    record = with_split(fixture_runs()["input"], 1000.0, gpu=0.25, input_wait=0.75)
    answer = from_run.recommendation(record, CAT, Constraints(max_gpus=2), PricingOptions(), trials=9)
    est = answer.sweep
    row = next(r for r in answer.rows if r.gpu.id == "h100_double")
    two = next(o for o in est.options if o.gpu.id == "h100_double" and o.gpus == 2)
    assert two.trials_per_gpu == 3  # two rounds of 6 slots; 4 per GPU would not save a round
    m = answer.measured
    assert m.backend == "jax" and m.compile_s > 0
    once = m.compile_s / 3600  # the trials share jax's compilation cache: compiled once per sweep
    trial = row.one_gpu_hours - once
    busy = row.gpu_share * (1 - (m.startup_s - m.compile_s) / 3600 / trial)  # start-up is the host's
    shared = trial * max(1.0, 3 * busy)
    assert two.wall_h == pytest.approx(once + math.ceil(9 / 6) * shared)
    assert two.cost_usd == pytest.approx(2 * USD_PER_H * two.wall_h)
    here = next(r for r in answer.rows if r.gpu.id == "h100_sxm")
    # one after another where it was measured
    assert est.here_h == pytest.approx(once + 9 * (here.one_gpu_hours - once))
    assert "compilation once" in est.basis
    assert est.fastest().wall_h <= two.wall_h


def stored_trial(index: int, status: str, params: dict, **result) -> StoredTrial:
    """A trial as store.trials reads it back: its row and its outcome."""
    outcome = TrialOutcome(key=f"k{index}", index=index, status=status, params=params, **result)
    return StoredTrial(key=f"k{index}", index=index, sweep_hash="h", status=status, params=params, result=outcome)


def moved(trial: StoredTrial, start: float) -> None:
    """The trial as if it had started at `start`, its duration the same."""
    trial.result.started_monotonic_s, trial.result.ended_monotonic_s = start, start + trial.result.duration_s


def test_a_stored_sweep_of_the_same_training_gives_the_trial_time_and_efficiency():
    def trial(i, start, duration, slot, script="train.py", status="ok", fixed=("--epochs", "5")):
        return stored_trial(
            i,
            status,
            {"lr": i / 10},
            command=["/usr/bin/python3", script, "--lr", str(i / 10), *fixed],
            duration_s=duration,
            started_monotonic_s=start,
            ended_monotonic_s=start + duration,
            slot=slot,
            telemetry={"gpu_name": "NVIDIA H100 80GB HBM3"},
        )

    run = ["python", "train.py", "--epochs", "5", "--lr", "0.001"]  # the watched run: its own lr
    # 4 trials of 100 s on 2 slots, back to back: 200 s of wall, speed-up 2 = the ideal
    sweeps = {
        "lr": [
            trial(0, 0, 100, "gpu0"),
            trial(1, 0, 100, "gpu1"),
            trial(2, 100, 100, "gpu0"),
            trial(3, 100, 100, "gpu1"),
            trial(4, 0, 5, "gpu0", script="other.py"),
        ],
        "old": [trial(0, 0, 50, "gpu0")],
    }
    found = sweep_cost.find_measured(run, sweeps, CAT)
    assert (found.name, found.trials, found.slots, found.trial_s, found.pruned) == ("lr", 4, 2, 100.0, 0)
    assert found.efficiency == pytest.approx(1.0) and found.gpu.id == "h100_sxm"
    assert "4 trials on the NVIDIA H100 SXM5 80GB, none pruned, 100.0 s each (mean)" in found.label
    # the same trials with a 100 s gap the scheduler left: 3 s of 4 busy
    moved(sweeps["lr"][2], 200)
    moved(sweeps["lr"][3], 200)
    assert sweep_cost.find_measured(run, sweeps, CAT).efficiency == pytest.approx(1.0)  # gaps not counted
    moved(sweeps["lr"][3], 300)
    assert sweep_cost.find_measured(run, sweeps, CAT).efficiency == pytest.approx((400 / 300) / 2)
    assert sweep_cost.find_measured(["python", "missing.py"], sweeps, CAT) is None


def test_a_sweep_of_the_script_with_other_arguments_is_another_training_and_pruning_counts():
    """Issue 75: a sweep of the same script with other fixed arguments (`--epochs 2`) costed the
    run's sweep, and its pruning was left out ("4.4 min one after another" against 2.5 min used).
    Another training is named and not used; a pruned trial counts for the time it ran: trials of
    100, 100, 20 and 30 s (two pruned) are 62.5 s a trial on average."""

    def trial(i, duration, status="ok", epochs="5"):
        return stored_trial(
            i,
            status,
            {"lr": 0.1 * (i + 1)},
            command=["python", "train.py", f"--lr={0.1 * (i + 1):g}", "--epochs", epochs],
            duration_s=duration,
            started_monotonic_s=0.0,
            ended_monotonic_s=duration,
            slot="cpu0",
        )

    run = ["python", "train.py", "--epochs", "5"]
    short = {"short": [trial(i, 40, epochs="2") for i in range(3)]}
    assert sweep_cost.find_measured(run, short, CAT) is None
    assert sweep_cost.unlike(run, short) == (
        "sweep short ran train.py as `python train.py --epochs 2`: another training, not counted"
    )
    pruned = {
        "sh": [trial(0, 100), trial(1, 100), trial(2, 20, "pruned"), trial(3, 30, "pruned"), trial(4, 9, "failed")]
    }
    found = sweep_cost.find_measured(run, pruned, CAT)
    assert (found.trials, found.pruned, found.trial_s, found.finished_s) == (4, 2, 62.5, 100.0)
    assert "2 of them pruned: a trial 62.5 s on average, a finished one 100.0 s" in found.label
    assert sweep_cost.unlike(run, pruned) is None
    assert sweep_cost.same_training(
        ["python", "-m", "pkg.train", "--x", "1"], ["py", "-m", "pkg.train", "--x", "1"], {}
    )


def test_a_run_with_nothing_timed_or_failed_is_refused_and_an_untimed_loop_keeps_its_memory_rows():
    failed = make_watch_record("bad1", events=[], status="failed", exit_code=1)
    with pytest.raises(UsageError, match="did not train"):
        from_run.measured_run(failed, CAT)
    with pytest.raises(UsageError, match="no throughput"):
        from_run.measured_run(make_record("b1", status="failed"), CAT)
    untimed = fixture_runs()["gpu"].model_copy(update={"windows": [], "samples_per_s": None, "warmup_windows": 0})
    untimed = untimed.model_copy(
        update={"fits": [f.model_copy(update={"windows": [], "steps": 0}) for f in untimed.fits]}
    )
    answer = from_run.recommendation(untimed, CAT, Constraints(max_gpus=1), PricingOptions())
    row = next(r for r in answer.rows if r.gpu.id == "h100_double")
    assert row.fits and row.throughput is None and row.hourly is not None
    assert any("no step timing" in reason and "gpuscout.watch.step()" in reason for reason in row.reasons)


def test_a_watch_record_that_stopped_before_its_first_window_says_so():
    record = fixture_runs()["gpu"]
    early = record.model_copy(update={"windows": [], "samples_per_s": None, "warmup_windows": 0})
    with pytest.raises(UsageError, match="before its first timing window"):
        from_run.measured_run(early, CAT)


def test_memory_the_run_used_decides_the_fit_and_names_the_batch_that_fits():
    record = fixture_runs()["gpu"]
    small = H100.model_copy(update={"id": "tiny", "name": "Tiny GPU", "nvml_patterns": ["Tiny"], "memory_gb": 4.0})
    cat = Catalog(gpus=(H100, small), prices=(), user_file=None)
    answer = from_run.recommendation(record, cat, Constraints(max_gpus=1), PricingOptions())
    job, peak = answer.job, record.main.peak_memory_bytes
    assert job.fixed_bytes + job.per_sample_bytes * job.batch_size == pytest.approx(peak)
    assert job.fixed_bytes == pytest.approx(16 * record.main.params)  # Adam's state, 16 B per parameter
    row = next(r for r in answer.rows if r.gpu.id == "tiny")
    assert not row.fits
    largest = int((0.9 * 4e9 - job.fixed_bytes) // job.per_sample_bytes)
    assert f"batch {largest} fits one" in "; ".join(row.reasons)
    assert largest < job.batch_size


def test_fix_first_points_at_tune_when_the_gpu_is_mostly_idle():
    runs = fixture_runs()
    assert measured.fix_first(from_run.measured_run(runs["gpu"], CAT)) is None
    advice = measured.fix_first(from_run.measured_run(runs["input"], CAT))
    assert "waiting for input" in advice and "gpuscout tune -- " in advice and runs["input"].command[-1] in advice
    assert "on the host" in measured.fix_first(from_run.measured_run(runs["host"], CAT))


def record_precision(record):
    return from_run.precision_of(record)


def gpu_bench_record(run_id: str, samples_per_s: float, **changes):
    from gpuscout.record.run import GpuInfo, Telemetry

    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", catalog_id="h100_sxm")
    telemetry = Telemetry(interval_s=0.1, sample_count=50, window_sample_count=50, gpu_util_mean_pct=100.0)
    return make_record(
        run_id,
        workload="resnet50",
        median=samples_per_s,
        device="gpu",
        gpu=gpu,
        telemetry=telemetry,
        batch_size=128,
        per_device_batch_size=128,
        unit="images/s",
        **changes,
    )


def test_a_bench_run_is_its_workloads_job_measured_on_its_gpu():
    full = catalog.load()
    record = gpu_bench_record("bench0001", 2894.0)
    answer = from_run.recommendation(record, full, Constraints(max_gpus=1), PricingOptions())
    rows = {r.gpu.id: r for r in answer.rows}
    assert rows["h100_sxm"].throughput.basis == "measured" and rows["h100_sxm"].throughput.throughput == 2894.0
    # all of the step on the GPU: the split adds nothing to the predictor's own scaling
    from gpuscout.catalog import predict

    expected = predict.scale(
        2894.0, full.get("h100_sxm"), full.get("h200"), record.precision, predict.alpha(answer.job.intensity)
    )
    assert rows["h200"].throughput.throughput == pytest.approx(expected)
    assert answer.job.batch_size == 128 and answer.job.dataset_units  # resnet50's reference dataset


def test_scaling_measured_by_gpuscout_scale_replaces_the_rule_of_thumb():
    from gpuscout.recommend import jobs, ranking
    from gpuscout.record.run import ScaleTag

    one = gpu_bench_record("s1", 1000.0, scale=ScaleTag(session="sess1", mode="weak", devices=1))
    two = gpu_bench_record("s2", 1900.0, devices=2, scale=ScaleTag(session="sess1", mode="weak", devices=2))
    other = gpu_bench_record("s3", 1800.0, devices=2, scale=ScaleTag(session="lonely", mode="weak", devices=2))
    found = jobs.measured_scaling([one, two, other])
    efficiency, label = found[("h100_sxm", 2)]
    assert efficiency == pytest.approx(1900 / (2 * 1000))  # the session without a 1-GPU run is left out
    assert "measured by gpuscout scale" in label and "sess1" in label
    job = from_run.job_from_run(one, from_run.measured_run(one, catalog.load()), None)
    job.scaling = found
    assert ranking.efficiency(job, H100, 2) == (efficiency, label)
    assert ranking.efficiency(job, H100, 4)[0] == scaling.EXPECTED_EFFICIENCY["NVLink"]  # not measured at 4
    assert jobs.measured_scaling([one, two], kind="transformer") == {}  # resnet50 is a convnet


def test_a_run_on_two_gpus_predicts_from_its_own_efficiency_against_its_one_gpu_peer():
    """Issue 48: the script at 1,800 samples/s on 2 H100s, 1,000 on one (the same tune session):
    90% efficiency measured, used at 2 and, the same loss per doubling, at 4 (0.9^2); its own
    figure comes back at 2, and one GPU's share of a sample is 2 x 0.9 / 1,800 of a second."""
    from gpuscout.recommend import ranking

    base = fixture_runs()["gpu"]
    one = with_split(base, 1000.0, gpu=1.0, input_wait=0.0).model_copy(update={"id": "one1"})
    main = base.main.model_copy(update={"replicas": 2, "devices": 2, "strategy": "DataParallel"})
    two = with_split(base, 1800.0, gpu=1.0, input_wait=0.0).model_copy(
        update={"id": "two2", "fits": [main if f is base.main else f for f in base.fits]}
    )
    answer = from_run.recommendation(two, CAT, Constraints(max_gpus=4), PricingOptions(), watch_records=[one, two])
    m = answer.measured
    assert m.devices == 2 and m.efficiency == pytest.approx(0.9)
    assert "90% data-parallel efficiency measured: 1,800 samples/s on 2 against 1,000 on one (run one1)" in answer.basis
    assert ranking.efficiency(answer.job, H100, 2)[0] == pytest.approx(0.9)
    assert ranking.efficiency(answer.job, H100, 4)[0] == pytest.approx(0.81)
    assert ranking.efficiency(answer.job, DOUBLE, 2)[0] == scaling.EXPECTED_EFFICIENCY["NVLink"]  # another kind
    seconds, _ = m.gpu_seconds_per_sample(H100, record_precision(two), 900.0, CAT, "transformer")
    assert seconds == pytest.approx(2 * 0.9 / 1800)
    at_two = measured.predict_run(m, H100, record_precision(two), 900.0, CAT, "transformer", 2, 0.9)
    at_one = measured.predict_run(m, H100, record_precision(two), 900.0, CAT, "transformer", 1, 1.0)
    assert at_two.samples_per_s == pytest.approx(1800) and at_one.samples_per_s == pytest.approx(1000)
    # no one-GPU peer in the store: the rule of thumb at 2, said as assumed
    alone = from_run.recommendation(two, CAT, Constraints(max_gpus=4), PricingOptions(), watch_records=[two])
    assert alone.measured.efficiency == scaling.EXPECTED_EFFICIENCY["NVLink"]
    assert "assumed" in alone.basis
