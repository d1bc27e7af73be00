"""What `%%gpuscout watch` costs a host-bound `fit` in a real Jupyter kernel, on any machine (the CPU
included): examples/notebook.ipynb's model and its one-thread PyDataset (8 ms of sleep a batch),
the same `fit` as a plain cell and under the magic, alternately (ABAB, PAIRS pairs), each timed by
the cell itself (time.perf_counter around `fit`). Without a GPU no NVML sampler runs, so what it
measures is the instrumentation inside the training loop. Prints the times and the median of the
per-pair ratios.

    PYTHONPATH=src python benchmarks/notebook_magic_host_loop.py --out OUT [--pairs 6] [--epochs 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = (
    "t0 = time.perf_counter(); model.fit(SlowBatches(), epochs=EPOCHS, verbose=0); "
    "print(json.dumps({{'kind': '{kind}', 's': time.perf_counter() - t0}}))"
)


def main() -> None:
    import nbformat
    from nbclient import NotebookClient

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    example = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    setup = next(c.source for c in example.cells if c.cell_type == "code")
    cells = [
        nbformat.v4.new_code_cell(f"{setup}\nimport time, json\nEPOCHS = {args.epochs}\n"),
        nbformat.v4.new_code_cell("%load_ext gpuscout"),
        nbformat.v4.new_code_cell(BODY.format(kind="warm-up")),
    ]
    for i in range(args.pairs):
        for kind in ("plain", "watched") if i % 2 == 0 else ("watched", "plain"):
            magic = f"%%gpuscout watch --store {args.out / 'results.sqlite'}\n" if kind == "watched" else ""
            cells.append(nbformat.v4.new_code_cell(magic + BODY.format(kind=kind)))
    notebook = nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    nbformat.write(notebook, args.out / "ran.ipynb")
    times: dict[str, list[float]] = {"plain": [], "watched": []}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for line in output.get("text", "").splitlines():
                if line.startswith("{") and '"kind"' in line and (found := json.loads(line))["kind"] in times:
                    times[found["kind"]].append(found["s"])
    ratios = [w / p for p, w in zip(times["plain"], times["watched"])]
    print(
        json.dumps(
            {
                "plain_s": times["plain"],
                "watched_s": times["watched"],
                "ratios": ratios,
                "median_ratio": statistics.median(ratios),
            }
        )
    )


if __name__ == "__main__":
    main()
