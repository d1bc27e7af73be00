import subprocess
import sys

from gpuscout.analysis.stats import import_scipy_in_background, summarize


def test_the_cli_starts_without_importing_scipy_stats():
    # scipy.stats takes ~1.5 s to import; every command and every sweep trial paid it at start-up.
    probe = "import sys, gpuscout.cli; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_summary_while_the_background_import_runs_waits_for_it():
    windows = [101.0, 99.0, 100.5, 98.0, 102.0]
    import_scipy_in_background()
    during = summarize(windows)  # may meet the import half done: the import lock makes it wait
    assert 98.0 <= during.ci95_low < during.median == 100.5 < during.ci95_high <= 102.0
    assert summarize(windows) == during


PLAN_EVERY_VERB = """
import sys, json, pathlib, tempfile
import gpuscout.cli
from gpuscout import bench, infer, recommend, scale, tune
from gpuscout.core.engine import MeasureOptions
from gpuscout.core.spec import Precision
from gpuscout.core.planning import DeviceChoice
from gpuscout.store import Store
from gpuscout.sweep import driver
from gpuscout.telemetry.nvml import Nvml

cpu = DeviceChoice(cpu=True)
tmp = pathlib.Path(tempfile.mkdtemp())
with Nvml() as nvml, Store(tmp / "s.sqlite") as store:
    bench.plan(["mlp", "gpt2_small"], bench.BenchOptions(backend="jax", device=cpu), nvml)
    infer.plan(["mlp"], bench.BenchOptions(backend="jax", device=cpu), infer.InferOptions(), nvml, None)
    scale.plan("mlp", scale.ScaleOptions(backend="jax", cpu=True), nvml)
    tune.plan("mlp", tune.TuneOptions(backend="jax", device=cpu), nvml)
    recommend.job_for_workload("resnet50", Precision.mixed_bfloat16, None, None, [], None)
    sweep = tmp / "w.yaml"
    sweep.write_text("name: w\\nworkload: mlp\\nmetric: {name: samples_per_s}\\nspace: {batch_size: [8, 16]}\\n"
                     "bench: {backend: jax}\\n")
    driver.plan(driver.check(sweep, driver.SweepOptions(cpu_slots=1), nvml), driver.SweepOptions(), store)
frameworks = ("keras", "tensorflow", "jax", "torch", "scipy")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in frameworks})))
"""


def test_importing_the_cli_and_planning_every_verb_loads_no_framework():
    """The parent never imports Keras, TensorFlow or JAX (DESIGN.md): planning a run of every verb
    must not either, nor scipy (statistics import it when they are computed, after a run)."""
    out = subprocess.run([sys.executable, "-c", PLAN_EVERY_VERB], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
