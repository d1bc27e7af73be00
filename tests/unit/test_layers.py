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
    return subprocess.run([str(LINT), "--config", str(config), "--no-cache"], capture_output=True, text=True,
                          timeout=300, cwd=config.parent, env={**os.environ, "PYTHONPATH": str(src)})


def test_the_floors_hold_and_a_planted_upward_import_breaks_them(tmp_path):
    kept = lint(ROOT / "pyproject.toml", ROOT / "src")
    assert kept.returncode == 0, kept.stdout[-3000:]
    assert "Contracts: 2 kept, 0 broken." in kept.stdout
    shutil.copytree(ROOT / "src" / "gpuscout", tmp_path / "src" / "gpuscout",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "src" / "gpuscout" / "core" / "planted.py").write_text(
        "def build():\n    from gpuscout.measure import engine  # the ground floor reaching up\n    return engine\n")
    broken = lint(tmp_path / "pyproject.toml", tmp_path / "src")
    assert broken.returncode == 1, broken.stdout[-3000:]
    assert "BROKEN" in broken.stdout and "gpuscout.core.planted -> gpuscout.measure.engine" in broken.stdout
