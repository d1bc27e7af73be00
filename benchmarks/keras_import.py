"""What a measuring child's `import keras` costs, as it is and with the packages no child uses hidden
from it (child/worker.HIDDEN_FROM_KERAS: matplotlib, pandas, scikit-learn, which the report and
MLflow install beside Keras), each in a fresh interpreter, the two interleaved.

    python benchmarks/keras_import.py [--repeats 5] [--backend jax]

Prints each side's seconds and the ratio of their medians (a ratio holds on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PLAIN = "import keras"
HIDDEN = "from gpuscout.child.worker import import_keras; import_keras()"


def once(code: str, backend: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "KERAS_BACKEND": backend})
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="jax")
    args = parser.parse_args()
    plain, hidden = [], []
    for _ in range(args.repeats):
        plain.append(once(PLAIN, args.backend))
        hidden.append(once(HIDDEN, args.backend))
    for name, seconds in (("import keras", plain), ("HIDDEN_FROM_KERAS hidden", hidden)):
        print(f"{name:26} median {statistics.median(seconds):.2f} s  ({', '.join(f'{s:.2f}' for s in seconds)})")
    print(f"hidden / plain            {statistics.median(hidden) / statistics.median(plain):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
