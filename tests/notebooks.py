"""Notebooks run as a user runs them: written with nbformat, executed in a fresh Jupyter kernel by
nbclient (over IPC, as gpuscout's own notebook runner does), and each cell's outputs read back."""

from __future__ import annotations

import os

import nbformat
from nbclient import NotebookClient

from gpuscout.measure import notebook_runner as runner
from tests.conftest import SRC

QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def write_notebook(path, cells: list[str]):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, str(path))
    return path


def execute(path, env: dict) -> list[list[dict]]:
    """Run the notebook in a fresh kernel with `env`; each cell's outputs (an error is one of them)."""
    notebook = nbformat.read(str(path), as_version=4)
    kernel_env = {**os.environ, "PYTHONPATH": str(SRC), **QUIET, **env}
    client = NotebookClient(
        notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    )
    runner.over_ipc(client)
    client.execute(env=kernel_env)
    return [cell.outputs for cell in notebook.cells]


def texts(outputs: list[dict], kind: str = "text/plain") -> str:
    found = []
    for output in outputs:
        if output["output_type"] == "stream":
            found.append(output["text"] if kind == "text/plain" else "")
        else:
            found.append(output.get("data", {}).get(kind, ""))
    return "\n".join(found)
