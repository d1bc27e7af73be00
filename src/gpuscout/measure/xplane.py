"""A profiler trace in XSpace form (`*.xplane.pb`), the one TensorFlow's profiler writes (jax writes
it too, beside the perfetto JSON that measure/trace_kernels.py reads first): each GPU's kernels,
in the shape trace_kernels.device_kernels gives them, so that a TensorFlow run's `--trace-steps`
gets the same per-GPU reading (busy time, collectives, the part of those alone).

The XSpace schema is TensorFlow's generated protobuf module (tsl/profiler/protobuf/xplane_pb2.py),
loaded from its file without importing TensorFlow itself (seconds, and a GPU context in the
watching process). Both TensorFlow and jax record GPU activity through the same profiler (TSL's
CUPTI tracer): a "/device:GPU:N" plane per GPU whose "Stream #..." lines hold the kernels, copies
and memsets, each event's name its kernel's, its "hlo_op" stat (XLA) or "tf_op" stat the op.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# a trace larger than this is not read (trace_kernels.MAX_TRACE_BYTES' counterpart, checked by
# trace_kernels.read: a protobuf holds the same events in about a fifth of the JSON's bytes)
MAX_XPLANE_BYTES = 128 << 20
NO_SCHEMA = (
    "TensorFlow's trace (xplane) is read with TensorFlow's own schema, which gpuscout could not load "
    "(no TensorFlow installed beside gpuscout, or a protobuf its schema refuses): open the trace with "
    "tensorboard"
)


def schema():
    """TensorFlow's xplane_pb2 module, or None where TensorFlow is not installed beside gpuscout."""
    if "tensorflow" in sys.modules:  # already paid for: its own module
        try:
            from tensorflow.tsl.profiler.protobuf import xplane_pb2

            return xplane_pb2
        except ImportError:
            return None
    found = importlib.util.find_spec("tensorflow")  # finds the package without importing it
    for folder in (found.submodule_search_locations or []) if found else []:
        path = Path(folder, "tsl", "profiler", "protobuf", "xplane_pb2.py")
        if path.is_file():
            spec = importlib.util.spec_from_file_location("gpuscout_xplane_pb2", path)
            module = importlib.util.module_from_spec(spec)
            try:  # the same descriptors TensorFlow registers if it is imported later (checked with 2.21)
                spec.loader.exec_module(module)
            except Exception:  # a protobuf runtime that this generated code refuses
                return None
            return module
    return None


def find(directory: Path) -> Path | None:
    found = sorted(directory.rglob("*.xplane.pb"))
    return found[0] if found else None


def device_kernels(path: Path, xplane_pb2) -> list[dict]:
    """The GPU kernels of the XSpace in `path`: name, ts_us, dur_us, op, device."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    kernels = []
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        stat_names = {i: m.name for i, m in plane.stat_metadata.items()}
        for line in plane.lines:
            if not (line.name.startswith("Stream") or line.display_name.startswith("Stream")):
                continue
            for event in line.events:
                meta = plane.event_metadata[event.metadata_id]
                start_ps = line.timestamp_ns * 1000 + event.offset_ps
                kernels.append(
                    {
                        "name": meta.display_name or meta.name,
                        "ts_us": start_ps / 1e6,
                        "dur_us": event.duration_ps / 1e6,
                        "op": _op(event, stat_names)[:200],
                        "device": plane.name,
                    }
                )
    return kernels


def _op(event, stat_names: dict) -> str:
    """The event's XLA instruction (hlo_op) or TensorFlow op (tf_op): a string, or a reference to
    a stat metadata's name."""
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) in ("hlo_op", "tf_op"):
            kind = stat.WhichOneof("value")
            return (
                stat.str_value
                if kind == "str_value"
                else stat_names.get(stat.ref_value, "")
                if kind == "ref_value"
                else ""
            )
    return ""
