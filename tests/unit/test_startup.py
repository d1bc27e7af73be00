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
from gpuscout import infer, recommend, scale, tune
from gpuscout.measure import plans as bench
from gpuscout.measure.engine import MeasureOptions
from gpuscout.core.spec import Precision
from gpuscout.measure.rules import DeviceChoice
from gpuscout.store import Store
from gpuscout.sweep import resume_plan
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
    checked = resume_plan.check(sweep, resume_plan.SweepOptions(cpu_slots=1), nvml)
    resume_plan.plan(checked, resume_plan.SweepOptions(), store)
frameworks = ("keras", "tensorflow", "jax", "torch", "scipy")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in frameworks})))
"""


def test_importing_the_cli_and_planning_every_verb_loads_no_framework():
    """The parent never imports Keras, TensorFlow or JAX (DESIGN.md): planning a run of every verb
    must not either, nor scipy (statistics import it when they are computed, after a run)."""
    out = subprocess.run([sys.executable, "-c", PLAN_EVERY_VERB], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_every_module_level_import_outside_the_child_is_a_declared_dependency():
    # A fresh install has only [project].dependencies (and what they require): `import click` in
    # the CLI broke `pip install gpuscout` once Typer 0.29 stopped requiring click, while the test
    # venv still had click through Ray. The child's modules run where the backend's extra is in.
    import ast
    import importlib.metadata as metadata
    from pathlib import Path

    from packaging.requirements import Requirement  # pytest's own dependency
    from packaging.utils import canonicalize_name

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    root = Path(__file__).resolve().parents[2]

    def applying(requirements) -> set[str]:
        """The names of the requirements a plain install on this Python takes (no extras)."""
        parsed = map(Requirement, requirements or ())
        return {canonicalize_name(r.name) for r in parsed if r.marker is None or r.marker.evaluate({"extra": ""})}

    declared = applying(tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"])
    required = {name for d in declared for name in applying(metadata.requires(d))}
    distributions = metadata.packages_distributions()
    undeclared = []
    # Modules of the child's outside child/: imported only inside functions that run in the child
    # (a transformer workload's builder), which the loop below checks
    child_only = {"gpuscout.workloads.transformer_layers"}
    for path in (root / "src" / "gpuscout").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # no module imports a child-only module where it is itself imported
            imported = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            assert not set(imported) & child_only, f"{path.relative_to(root)} imports {imported} at module level"
        dotted = ".".join(path.relative_to(root / "src").with_suffix("").parts)
        if "child" in path.parts or dotted in child_only:
            continue
        for node in tree.body:  # module level: what importing the module needs
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in ("gpuscout", "__future__"):
                    continue
                names = {canonicalize_name(d) for d in distributions.get(top, [top])}
                if not names & (declared | required):
                    undeclared.append(f"{path.relative_to(root)}: {module}")
    assert undeclared == []


def test_a_bad_number_is_named_by_the_option_the_user_typed():
    from typing import Annotated

    import pytest
    import typer

    from gpuscout.cli import check_numbers, option_flags
    from gpuscout.core.errors import UsageError

    def command(
        trials_per_gpu: Annotated[float, typer.Option("--per-gpu")] = 1.0,
        window_seconds: Annotated[float, typer.Option(help="seconds")] = 1.0,
    ) -> None: ...

    flags = option_flags(command)
    assert flags == {"trials_per_gpu": "--per-gpu", "window_seconds": "--window-seconds"}
    with pytest.raises(UsageError, match="^--per-gpu takes a finite number from 0 to 9,007,199,254,740,992, got nan$"):
        check_numbers({"trials_per_gpu": float("nan"), "window_seconds": 1.0}, flags)
