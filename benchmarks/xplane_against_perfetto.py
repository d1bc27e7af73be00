"""The XSpace reader (measure/xplane.py, TensorFlow's trace format) against the perfetto reader
(measure/trace_kernels.py) on the same jax trace, which holds both: the per-GPU figures must agree.
TensorFlow's GPU traces come from the same profiler (TSL's CUPTI tracer) as jax's.

    gpuscout watch --trace-steps 60:64 --store S -- python3 benchmarks/user_input/dp_train.py spread light
    python3 benchmarks/xplane_against_perfetto.py --trace S_FOLDER/traces/RECORD --steps 5 [--schema xplane_pb2.py]

--schema: TensorFlow's generated xplane_pb2.py where TensorFlow is not installed (the GPU machines). Prints
each plane's lines, then both readers' per-GPU figures as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from gpuscout.measure import trace_kernels, xplane


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--schema", type=Path, help="xplane_pb2.py, where TensorFlow is not installed")
    args = parser.parse_args()
    if args.schema:
        spec = importlib.util.spec_from_file_location("xplane_pb2", args.schema)
        schema = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(schema)
    else:
        schema = xplane.schema()
    found = xplane.find(args.trace)
    space = schema.XSpace()
    space.ParseFromString(found.read_bytes())
    for plane in space.planes:
        print(plane.name, [line.name for line in plane.lines][:12])
    perfetto = trace_kernels.per_device(trace_kernels.device_kernels(trace_kernels.load_trace(args.trace)), args.steps)
    xspace = trace_kernels.per_device(xplane.device_kernels(found, schema), args.steps)
    print(json.dumps({"perfetto": perfetto, "xplane": xspace}, indent=1))


if __name__ == "__main__":
    main()
