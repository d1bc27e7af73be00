"""The package's floors, as pyproject's import-linter contracts state them: kept by the code, and
broken, with the offending import named, by an upward import planted in a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(config: Path, src: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), str(config), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=config.parent,
        env={**os.environ, "PYTHONPATH": str(src)},
    )


def test_the_floors_hold_and_a_planted_upward_import_breaks_them(tmp_path):
    kept = lint(ROOT / "pyproject.toml", ROOT / "src")
    assert kept.returncode == 0, kept.stdout[-3000:]
    assert "Contracts: 3 kept, 0 broken." in kept.stdout
    shutil.copytree(
        ROOT / "src" / "gpuscout", tmp_path / "src" / "gpuscout", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    src = tmp_path / "src" / "gpuscout"
    plant = {  # each breaks one contract, inside a function as most of the package's lazy imports are
        "core/planted.py": "from gpuscout.measure import engine  # the ground floor reaching up",
        "tune/planted.py": "from gpuscout.watch import attach  # a verb taking another's module",
        "report/planted.py": "from gpuscout.child import worker  # the measured process's code in the parent",
        "store/planted_a.py": "from gpuscout.store import planted_b  # two modules importing each other",
        "store/planted_b.py": "from gpuscout.store import planted_a",
    }
    for path, line in plant.items():
        (src / path).write_text(f"def build():\n    {line}\n")
    broken = lint(tmp_path / "pyproject.toml", tmp_path / "src")
    assert broken.returncode == 1, broken.stdout[-3000:]
    assert "Contracts: 0 kept, 3 broken." in broken.stdout, broken.stdout[-3000:]
    for named in (
        "gpuscout.core.planted -> gpuscout.measure.engine",
        "gpuscout.tune.planted -> gpuscout.watch.attach",
        "gpuscout.report.planted -> gpuscout.child.worker",
        "- .planted_b -> .planted_a",
    ):
        assert named in broken.stdout, named
