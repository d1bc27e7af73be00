"""The tree's style, as pyproject's [tool.ruff] states it: formatted by `ruff format`, clean under
`ruff check`, and no module of the package over MAX_MODULE_LINES (issue 61: a module past it holds
two things, and a change to one reads the other)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")
MAX_MODULE_LINES = 400


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_tree_is_formatted_and_clean_and_a_planted_fault_is_named(tmp_path):
    checked = ruff("check", "--no-cache", ".")
    assert checked.returncode == 0, checked.stdout[-3000:]
    formatted = ruff("format", "--check", "--no-cache", ".")
    assert formatted.returncode == 0, "run `ruff format .`:\n" + formatted.stdout[-3000:]
    # the same configuration names what it exists to catch, in a copy
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "planted.py").write_text("import os, sys\n\ndef f(x = 1):\n    return [x for l in range(3)]\n")
    planted = ruff("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert planted.returncode == 1
    assert {"F401", "E401", "E741"} <= {line.split()[1] for line in planted.stdout.splitlines() if ".py:" in line}
    assert ruff("format", "--check", "--no-cache", ".", cwd=tmp_path).returncode == 1


def test_the_typed_wires_pass_the_type_checker_and_a_planted_fault_is_named(tmp_path):
    """mypy, strict on pyproject's [tool.mypy] files (the tune settings, the kinds of change, the
    run-level test and the gate); and the same configuration catches what it exists to catch."""
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert checked.returncode == 0, checked.stdout[-3000:]
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from gpuscout.core.tune_settings import TuneSettings\n\n"
        "def workers(s: TuneSettings) -> int:\n    return s.workers\n\n"
        "def untyped(x):\n    return x\n"
    )
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"), str(planted)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert found.returncode == 1
    assert "[return-value]" in found.stdout and "[no-untyped-def]" in found.stdout, found.stdout


def test_no_module_of_the_package_is_over_the_limit():
    sizes = {p.relative_to(ROOT / "src"): len(p.read_text().splitlines()) for p in (ROOT / "src").rglob("*.py")}
    over = {str(p): n for p, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
    assert len(sizes) > 150  # the package's modules were read
