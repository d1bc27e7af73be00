"""The package's shape, checked from its source (docs/architecture.md): no private name taken
from another module, nothing loose at the top. The floors, the cycles and the child's boundary
are import-linter's contracts (pyproject.toml, tests/unit/test_layers.py)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def modules(src: Path) -> dict[str, Path]:
    return {
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (src / "gpuscout").rglob("*.py")
    }


def private_imports(known: dict[str, Path]) -> list[str]:
    """`from gpuscout.x import _name` anywhere in the package, relative imports resolved."""
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found += [
                f"{name} takes {base}.{a.name}"
                for a in node.names
                if base.startswith("gpuscout") and base != name and a.name.startswith("_") and not a.name.endswith("__")
            ]
    return found


def test_no_module_takes_another_modules_private_names():
    assert not private_imports(modules(SRC))


def test_the_check_sees_a_private_name(tmp_path):
    pkg = tmp_path / "gpuscout"
    (pkg / "child").mkdir(parents=True)
    for name in ("__init__.py", "child/__init__.py", "child/worker.py"):
        (pkg / name).write_text("")
    (pkg / "a.py").write_text("from gpuscout import b\n_secret = 1\n")
    (pkg / "b.py").write_text("def f():\n    from gpuscout.a import _secret\n")
    assert private_imports(modules(tmp_path)) == ["gpuscout.b takes gpuscout.a._secret"]


def test_the_top_of_the_package_holds_only_packages():
    """Each verb a package, the shared code in core/: a module loose at the top is a verb or a
    shared module put in the wrong place (docs/architecture.md)."""
    loose = sorted(p.name for p in (SRC / "gpuscout").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []


def test_help_leads_with_the_users_own_script():
    """`gpuscout --help` lists the verbs in a user's workflow: watch first, then tune (issue 29)."""
    from typer.testing import CliRunner

    from gpuscout.cli import app

    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"}).output
    commands = text[text.index("Commands") :]
    order = [commands.index(f"│ {verb} ") for verb in ("watch", "tune", "doctor", "recommend", "sweep", "bench")]
    assert order == sorted(order)
    assert text.index("gpuscout watch -- python train.py") < text.index("gpuscout bench resnet50")
    assert "Trustworthy training benchmarks" not in text


def test_a_flag_shows_no_type_in_help_and_an_option_keeps_its_own():
    """A flag takes no value: its help row has no `<bool>` (issue 62, item 8); `--by` still says
    it takes a string."""
    from typer.testing import CliRunner

    from gpuscout.cli import app

    for verb in ("compare", "sweep", "watch", "bench"):
        text = CliRunner().invoke(app, [verb, "--help"], env={"COLUMNS": "80"}).output
        assert "<bool>" not in text and "--help" in text, verb
    assert "<str>" in CliRunner().invoke(app, ["compare", "--help"], env={"COLUMNS": "80"}).output


def knob_literals(tune: Path, knobs: set[str]) -> list[str]:
    """Each string literal that is a change's name (a knob) in tune's modules outside tune/changes/:
    a policy kept about a change by its name, away from the change."""
    found = []
    for path in sorted(tune.rglob("*.py")):
        if "changes" in path.relative_to(tune).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in knobs:
                found.append(f"{path.relative_to(tune.parent)}:{node.lineno} {node.value!r}")
    return found


def test_a_change_is_known_by_name_only_in_its_own_modules(tmp_path):
    """Issue 88: what a change is (its order in a round, whether it repeats, what it alters of the
    training, the advice once it is kept) is its ChangeKind's; the planner, the search, judging,
    same_training and the remainder read the kinds and typed settings, never a change's name. A
    policy written by name outside tune/changes/ is named here, the test's own plant included."""
    from gpuscout.tune.changes import CHANGES

    tune = SRC / "gpuscout" / "tune"
    assert knob_literals(tune, set(CHANGES)) == []
    planted = tmp_path / "tune"
    (planted / "changes").mkdir(parents=True)
    (planted / "changes" / "cache.py").write_text('NAME = "cache"\n')  # its own module: fine
    (planted / "search.py").write_text('PACE_FIRST = ("jit_compile",)\n')
    assert knob_literals(planted, set(CHANGES)) == ["tune/search.py:1 'jit_compile'"]
