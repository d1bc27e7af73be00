"""`gpuscout tune`: what each optimisation buys on this GPU, the largest batch that fits, and
whether training is input-bound. Every measurement is an ordinary benchmark run (a child per
run, stored with a `tune` tag); this module decides which runs to make and what they say.

Ablation, one factor at a time. Input against the baseline (fp32, XLA off where the backend
allows it, the naive one-thread input pipeline): the tuned tf.data pipeline, and synthetic
device-resident data (the ceiling no pipeline beats). Precision and XLA against the model alone
(fp32 on synthetic data): measured behind a slow pipeline they would show the pipeline, not
themselves (on an H200 a naive ResNet-50 pipeline held every precision at ~550 img/s). Then the
best of each together, against the baseline.
Speedups carry a bootstrap 95% interval (analysis/compare.py) and the loss after a fixed number
of steps is compared with the baseline's, so that a precision that breaks training is caught.

Largest batch: probes (fresh children, a short protocol) doubling from the default batch until
one runs out of memory, then a bisection to a multiple of 8; then throughput at fractions of it
and the knee (the smallest batch within KNEE_SHARE of the best throughput).

Input-bound: the pipeline alone (one thread, and tuned), the model alone (synthetic) and both
together; the share of step time spent waiting for input is classified as the TensorFlow
profiler's input-pipeline analyser does (< 5% not, 5-20% moderately, > 20% highly input-bound).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

from gpuscout import bench as bench_lib
from gpuscout import engine
from gpuscout.analysis.compare import ratio_ci
from gpuscout.errors import RunError, UsageError, UserCodeError
from gpuscout.executor.local import run_child
from gpuscout.provenance import utc_now
from gpuscout.record.run import RunRecord, TuneTag
from gpuscout.spec import Backend, DataMode, Precision, RunSpec, Task
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml
from gpuscout.workloads.user import last_traceback

PARTS = ("ablation", "batch", "input")
LOSS_CHANGE_LIMIT = 0.10  # relative change of the fixed-step loss that counts as "changed training"
KNEE_SHARE = 0.90
INPUT_BOUND = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))
BATCH_STEP = 8  # batches found by the search are multiples of this (of 1 below it)


@dataclass
class TuneOptions:
    backend: str = "auto"
    gpu: int | None = None
    cpu: bool = False
    parts: tuple[str, ...] = PARTS
    budget_s: float = 30 * 60
    warmup_steps: int = 5
    windows: int = 3
    window_seconds: float = 1.0
    window_steps: int = 5
    batch_size: int | None = None
    max_batch: int | None = None
    pipeline: str | None = None  # the user's file.py:make_dataset
    pipeline_cost: int = 1
    model: str | None = None
    timeout_s: float = bench_lib.DEFAULT_TIMEOUT_S
    seed: int = 0


@dataclass
class Session:
    options: TuneOptions
    engine: engine.Session
    store: Store
    progress: engine.Progress
    base: RunSpec
    started: float = field(default_factory=time.monotonic)
    durations: list[float] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def id(self) -> str:
        return self.engine.group_id

    def fits_budget(self, label: str) -> bool:
        """The first run always starts (tune() refused budgets below its floor); later ones only
        when the median run so far still fits in what is left."""
        if not self.durations:
            return True
        guess = statistics.median(self.durations)
        if time.monotonic() - self.started + guess > self.options.budget_s:
            self.skipped.append(label)
            self.progress.note(f"skipped {label}: it would overrun the --budget")
            return False
        return True

    def run(self, label: str, part: str, **changes) -> RunRecord | None:
        """One benchmark run of the base spec with `changes`, tagged and stored; None if skipped."""
        if not self.fits_budget(label):
            return None
        spec = self.base.model_copy(update=changes)
        self.count += 1
        self.progress.run_started(spec, label, self.count, 0)
        began = time.monotonic()
        record = engine.measure(spec, self.engine, on_event=lambda e: self.progress.event(spec, e))[0]
        self.durations.append(time.monotonic() - began)
        record = record.model_copy(update={"tune": TuneTag(session=self.id, part=part, label=label)})
        self.store.put(record)
        self.progress.run_finished(label, [record])
        return record

    def pipeline_alone(self, label: str, **changes) -> dict | None:
        """The input pipeline without the model, in a child on the CPU; samples/s and its windows."""
        if not self.fits_budget(label):
            return None
        spec = self.base.model_copy(update={"task": Task.pipeline, "gpu_index": None, "backend": Backend.tensorflow
                                            if _has_tensorflow() else self.base.backend, **changes})
        self.count += 1
        self.progress.run_started(spec, label, self.count, 0)
        began = time.monotonic()
        outcome = run_child(spec, timeout_s=self.options.timeout_s, on_event=lambda e: self.progress.event(spec, e))
        self.durations.append(time.monotonic() - began)
        if outcome.status != "ok":
            message = f"{label}: {outcome.message}"
            if spec.user_pipeline:  # measured first, before any model run: bad input, not a failed run
                raise UserCodeError(message, last_traceback(outcome.stderr_tail))
            self.progress.run_finished(label, [])
            return {"label": label, "status": outcome.status, "message": outcome.message}
        rates = [w.samples / w.duration_s for w in outcome.result.windows]
        self.progress.run_finished(label, [])
        return {"label": label, "status": "ok", "source": outcome.result.pipeline_source,
                "samples_per_s": statistics.median(rates), "windows_samples_per_s": rates}


def _has_tensorflow() -> bool:
    from gpuscout import backends

    return backends.is_installed(Backend.tensorflow)


def _throughput(record: RunRecord | None) -> float | None:
    return record.samples_per_s if record and record.ok else None


def speedup(record: RunRecord | None, baseline: RunRecord | None) -> dict | None:
    if not _throughput(record) or not _throughput(baseline):
        return None
    low, high = ratio_ci(record.window_samples_per_s(), baseline.window_samples_per_s())
    return {"ratio": record.samples_per_s / baseline.samples_per_s, "ci95_low": low, "ci95_high": high}


def loss_change(record: RunRecord | None, baseline: RunRecord | None) -> dict | None:
    """The fixed-step loss against the baseline's, for runs fed the same data (other input modes
    see other samples, so their losses say nothing about the setting)."""
    if not record or not baseline or record.fixed_step_loss is None or baseline.fixed_step_loss is None:
        return None
    if record.data != baseline.data:
        return None
    new, old = record.fixed_step_loss, baseline.fixed_step_loss
    broken = not math.isfinite(new)
    relative = math.inf if broken else abs(new - old) / max(abs(old), 1e-6)
    return {"baseline": old, "value": new, "steps": record.fixed_steps, "relative": relative,
            "changed": broken or relative > LOSS_CHANGE_LIMIT}


def classify_wait(share: float | None) -> str | None:
    if share is None:
        return None
    return next(label for limit, label in INPUT_BOUND if share < limit)


def _row(label: str, record: RunRecord | None, reference: RunRecord | None, factor: str | None, versus: str) -> dict:
    return {"label": label, "factor": factor, "versus": versus, "run_id": record.id if record else None,
            "status": record.status if record else "skipped",
            "precision": record.precision.value if record else None, "xla": record.xla if record else None,
            "data": record.data.value if record else None,
            "samples_per_s": _throughput(record),
            "throughput": record.throughput.model_dump() if record and record.throughput else None,
            "speedup": speedup(record, reference), "loss": loss_change(record, reference),
            "input_wait_share": record.input_wait_share if record else None}


def ablation(session: Session, precisions: list[Precision]) -> dict:
    """Input settings and the combined run against the baseline (fp32, XLA off where possible,
    naive input); precision and XLA against the same model on synthetic data, so that a slow
    input pipeline cannot hide what they buy."""
    backend = session.base.backend
    base_xla = backend is Backend.jax  # jax always compiles
    baseline = session.run("baseline: fp32, " + ("XLA (always on jax)" if base_xla else "no XLA") + ", naive input",
                           "ablation", precision=Precision.fp32, xla=base_xla, data=DataMode.naive)
    runs: dict[str, dict | None] = {}
    runs["synthetic"] = session.run("synthetic data", "ablation", precision=Precision.fp32, xla=base_xla,
                                    data=DataMode.synthetic)
    runs["pipeline"] = session.run("tuned input pipeline", "ablation", precision=Precision.fp32, xla=base_xla,
                                   data=DataMode.pipeline)
    model = runs["synthetic"]
    rows = [_row("baseline", baseline, baseline, None, "baseline"),
            _row("tuned input pipeline (parallel map, cache, prefetch)", runs["pipeline"], baseline, "input", "baseline"),
            _row("synthetic data on the device (the input ceiling)", model, baseline, "input", "baseline")]
    for p in precisions:
        if p is not Precision.fp32:
            runs[p.value] = session.run(f"{p.value} (model alone)", "ablation", precision=p, xla=base_xla,
                                        data=DataMode.synthetic)
            rows.append(_row(p.value, runs[p.value], model, "precision", "fp32, synthetic data"))
    if backend is Backend.tensorflow:
        runs["xla"] = session.run("XLA on (model alone)", "ablation", precision=Precision.fp32, xla=True,
                                  data=DataMode.synthetic)
        rows.append(_row("XLA on (jit_compile=True)", runs["xla"], model, "xla", "fp32, synthetic data"))
    # the best of each factor, together
    good = [r for r in rows if r["factor"] == "precision" and r["speedup"] and not (r["loss"] or {}).get("changed")]
    faster = [r for r in good if r["speedup"]["ratio"] > 1]
    best_precision = max(faster, key=lambda r: r["speedup"]["ratio"])["label"] if faster else Precision.fp32.value
    xla_row = next((r for r in rows if r["factor"] == "xla"), None)
    use_xla = base_xla or bool(xla_row and xla_row["speedup"] and xla_row["speedup"]["ratio"] > 1)
    combined = session.run("combined", "ablation", precision=Precision(best_precision), xla=use_xla,
                           data=DataMode.pipeline)
    rows.append(_row(f"combined: {best_precision}, {'XLA' if use_xla else 'no XLA'}, tuned pipeline", combined,
                     baseline, "combined", "baseline"))
    return {"baseline_run": baseline.id if baseline else None, "rows": rows,
            "best": {"precision": best_precision, "xla": use_xla},
            "runs": runs, "combined": combined,
            "note": None if backend is Backend.tensorflow else "the jax backend always compiles with XLA: no XLA-off row"}


def _round_batch(value: float) -> int:
    return max(1, int(value) // BATCH_STEP * BATCH_STEP if value >= BATCH_STEP else int(value))


def batch_search(session: Session, precision: Precision, use_xla: bool) -> dict:
    start = session.base.batch_size
    on_gpu = session.base.gpu_index is not None
    cap = session.options.max_batch or start * (64 if on_gpu else 8)
    probe = dict(precision=precision, xla=use_xla, data=DataMode.synthetic, warmup_steps=1, windows=1, window_steps=2,
                 window_seconds=0.0)
    probes: list[dict] = []

    def fits(batch: int) -> bool | None:
        record = session.run(f"probe batch {batch}", "batch_probe", batch_size=batch, **probe)
        if record is None:
            return None
        message = record.error.message if record.error else None
        probes.append({"batch_size": batch, "status": record.status, "run_id": record.id,
                       "peak_memory_bytes": record.peak_memory_bytes, "message": message})
        if record.status not in ("ok", "oom"):
            raise RunError(f"the batch probe at {batch} ended {record.status}: {message}")
        return record.ok

    lo, hi, limited_by = None, None, "memory"
    batch = start
    while True:
        ok = fits(batch)
        if ok is None:
            limited_by = "budget"
            break
        if not ok:
            hi = batch
            break
        lo = batch
        if batch >= cap:
            limited_by = "cap"
            break
        batch = min(batch * 2, cap)
    if lo is None and hi is not None:  # even the default does not fit: search down
        batch = hi
        while batch > 1 and lo is None:
            batch //= 2
            ok = fits(batch)
            if ok is None:
                break
            if ok:
                lo = batch
            else:
                hi = batch
    while lo is not None and hi is not None and hi - lo > (BATCH_STEP if lo >= BATCH_STEP else 1):
        middle = _round_batch((lo + hi) / 2)
        if middle <= lo or middle >= hi:
            break
        ok = fits(middle)
        if ok is None:
            limited_by = "budget"
            break
        lo, hi = (middle, hi) if ok else (lo, middle)
    if lo is None:
        return {"largest": None, "probes": probes, "limited_by": limited_by, "curve": [], "knee": None}
    points = sorted({b for b in (start, lo // 8, lo // 4, lo // 2, lo) if b >= 1}, reverse=True)
    points = sorted({_round_batch(b) for b in points})
    curve = []
    for b in points:
        record = session.run(f"batch {b}", "batch_curve", batch_size=b, precision=precision, xla=use_xla,
                             data=DataMode.synthetic)
        if record is not None:
            curve.append({"batch_size": b, "run_id": record.id, "status": record.status,
                          "samples_per_s": _throughput(record),
                          "throughput": record.throughput.model_dump() if record.throughput else None,
                          "peak_memory_bytes": record.peak_memory_bytes})
    measured = [c for c in curve if c["samples_per_s"]]
    knee = None
    if measured:
        best = max(c["samples_per_s"] for c in measured)
        knee = min(c["batch_size"] for c in measured if c["samples_per_s"] >= KNEE_SHARE * best)
    return {"largest": lo, "first_oom": hi, "limited_by": limited_by if hi is None else "memory",
            "cap": cap, "probes": probes, "curve": curve, "knee": knee, "default": start}


def input_analysis(session: Session, precision: Precision, use_xla: bool, ablation_runs: dict,
                   user_pipeline: dict | None) -> dict:
    model_alone = ablation_runs.get("synthetic")
    both = ablation_runs.get("pipeline")
    if precision is not Precision.fp32 or model_alone is None:
        model_alone = session.run("model alone (synthetic)", "input", precision=precision, xla=use_xla,
                                  data=DataMode.synthetic)
    if user_pipeline is not None:
        alone = user_pipeline
        model_rate = _throughput(model_alone)
        if not alone or alone["status"] != "ok" or not model_rate:
            return {"pipeline": alone, "model_samples_per_s": model_rate, "verdict": None}
        wait = max(0.0, 1 - alone["samples_per_s"] / model_rate)
        return {"pipeline": alone, "model_samples_per_s": model_rate, "predicted_wait_share": wait,
                "starves": alone["samples_per_s"] < model_rate, "verdict": classify_wait(wait),
                "headroom": alone["samples_per_s"] / model_rate}
    one_core = session.pipeline_alone("pipeline alone, one thread", data=DataMode.naive)
    tuned = session.pipeline_alone("pipeline alone, tuned", data=DataMode.pipeline)
    if precision is not Precision.fp32 or both is None:
        both = session.run("model + tuned pipeline", "input", precision=precision, xla=use_xla, data=DataMode.pipeline)
    model_rate = _throughput(model_alone)
    share = both.input_wait_share if both else None
    per_core = one_core["samples_per_s"] if one_core and one_core["status"] == "ok" else None
    return {"pipeline_one_thread": one_core, "pipeline_tuned": tuned, "model_samples_per_s": model_rate,
            "together_samples_per_s": _throughput(both), "together_run": both.id if both else None,
            "input_wait_share": share, "verdict": classify_wait(share),
            "cores_needed": math.ceil(model_rate / per_core) if model_rate and per_core else None}


SNIPPETS = {
    "mixed_bfloat16": "keras.mixed_precision.set_global_policy('mixed_bfloat16')",
    "mixed_float16": "keras.mixed_precision.set_global_policy('mixed_float16')  # Keras adds loss scaling in fit",
    "xla": "model.compile(optimizer, loss, jit_compile=True)",
    "pipeline": ("dataset = (tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(n)\n"
                 "           .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
                 "           .batch(batch_size).prefetch(tf.data.AUTOTUNE))"),
    "memory_growth": ("for gpu in tf.config.list_physical_devices('GPU'):\n"
                      "    tf.config.experimental.set_memory_growth(gpu, True)"),
}


def recommendations(report: dict, backend: Backend) -> list[dict]:
    out = []
    ab = report.get("ablation") or {}
    for row in ab.get("rows", []):
        gain = row["speedup"]
        if not gain or gain["ratio"] <= 1.0 or row["factor"] in (None, "combined"):
            continue
        if row["factor"] == "input" and row["data"] == "synthetic":
            continue  # a ceiling, not something to paste
        if (row["loss"] or {}).get("changed"):
            continue
        key = row["precision"] if row["factor"] == "precision" else ("xla" if row["factor"] == "xla" else "pipeline")
        cost = {"mixed_float16": "fp16 needs loss scaling (Keras' fit does it; a custom loop must use LossScaleOptimizer)",
                "mixed_bfloat16": "needs bf16 tensor cores (Ampere or newer); keep the last layer's output in float32",
                "xla": "a compile at the first step and at every new input shape",
                "pipeline": "more host threads and memory for the cache"}[key]
        out.append({"title": row["label"], "gain": gain, "code": SNIPPETS[key], "cost": cost})
    batch = report.get("batch") or {}
    curve = {c["batch_size"]: c for c in batch.get("curve", []) if c["samples_per_s"]}
    knee, default = batch.get("knee"), batch.get("default")
    if knee and default in curve and knee in curve and knee != default:
        ratio = curve[knee]["samples_per_s"] / curve[default]["samples_per_s"]
        if ratio > 1.0:
            out.append({"title": f"batch size {knee} (the knee; the largest that fits is {batch['largest']})",
                        "gain": {"ratio": ratio, "ci95_low": None, "ci95_high": None},
                        "code": f"model.fit(dataset.batch({knee}), ...)",
                        "cost": "a larger batch usually needs a larger learning rate (scale it with the batch, "
                                "with warm-up) and can change final accuracy"})
    out.sort(key=lambda r: -r["gain"]["ratio"])
    if backend is Backend.tensorflow:
        out.append({"title": "memory growth (lets other processes share the GPU; no speedup measured)",
                    "gain": None, "code": SNIPPETS["memory_growth"],
                    "cost": "fragmentation can cost a little memory; the largest batch may shrink slightly"})
    return out


def tune(workload: str | None, options: TuneOptions, nvml: Nvml, store: Store,
         progress: engine.Progress | None = None) -> dict:
    progress = progress or engine.Progress()
    unknown = [p for p in options.parts if p not in PARTS]
    if unknown:
        raise UsageError(f"unknown --parts {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    if options.budget_s <= 0:
        raise UsageError(f"--budget must be > 0 minutes, got {options.budget_s / 60:g}")
    baseline_floor = options.warmup_steps * 0.05 + options.windows * options.window_seconds + 10
    if options.budget_s < baseline_floor:
        raise UsageError(f"a --budget of {options.budget_s / 60:g} min is too small for even the baseline run "
                         f"(~{baseline_floor:.0f} s of windows and start-up): give at least {math.ceil(baseline_floor / 60)} min")
    if options.pipeline:
        from pathlib import Path

        path, _, function = options.pipeline.rpartition(":")
        if not path or not function.isidentifier() or not Path(path).is_file() or not path.endswith(".py"):
            raise UsageError(f"--pipeline {options.pipeline!r}: give an existing file.py:function that returns a tf.data.Dataset")
        if not _has_tensorflow():
            raise UsageError("--pipeline measures a tf.data pipeline: install TensorFlow (pip install 'gpuscout[tensorflow]')")
        options.pipeline = f"{Path(path).resolve()}:{function}"
    bench_options = bench_lib.BenchOptions(
        backend=options.backend, batch_size=options.batch_size, warmup_steps=options.warmup_steps,
        windows=options.windows, window_steps=options.window_steps, window_seconds=options.window_seconds,
        gpu=options.gpu, cpu=options.cpu, timeout_s=options.timeout_s, seed=options.seed, model=options.model,
        pipeline_cost=options.pipeline_cost, fit_check=False)
    specs, notice = bench_lib.plan([workload] if workload else [], bench_options, nvml)
    if notice:
        progress.note(notice)
    base = specs[0]
    precisions = [Precision.fp32, Precision.mixed_float16, Precision.mixed_bfloat16]
    notes = []
    if base.gpu_index is not None:
        cc = nvml.gpu(base.gpu_index).compute_capability
        if cc is not None and float(cc) < 8.0:
            precisions.remove(Precision.mixed_bfloat16)
            notes.append(f"mixed_bfloat16 left out: compute capability {cc} has no bf16 tensor cores")
    session = Session(options, engine.Session(nvml, bench_options.measure_options()), store, progress, base)
    # The user's pipeline runs first, alone on the CPU: a mistake in it is bad input (exit 2)
    # before any measurement, not a failure after half a tuning session.
    user_pipeline = (session.pipeline_alone("your pipeline alone", user_pipeline=options.pipeline)
                     if options.pipeline and "input" in options.parts else None)
    report: dict = {"session": session.id, "created_utc": utc_now(), "workload": base.workload,
                    "backend": base.backend.value, "device": base.device_kind,
                    "gpu": nvml.gpu(base.gpu_index).name if base.gpu_index is not None else None,
                    "default_batch_size": base.batch_size, "budget_s": options.budget_s, "notes": notes}
    best_precision, use_xla, runs = Precision.fp32, base.backend is Backend.jax, {}
    if "ablation" in options.parts:
        ab = ablation(session, precisions)
        runs = ab.pop("runs")
        ab.pop("combined")
        report["ablation"] = ab
        best_precision, use_xla = Precision(ab["best"]["precision"]), ab["best"]["xla"]
    if "batch" in options.parts:
        report["batch"] = batch_search(session, best_precision, use_xla)
    if "input" in options.parts:
        report["input"] = input_analysis(session, best_precision, use_xla, runs, user_pipeline)
    report["recommendations"] = recommendations(report, base.backend)
    report["skipped"] = session.skipped
    report["elapsed_s"] = time.monotonic() - session.started
    return report
