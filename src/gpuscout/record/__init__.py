"""The typed record: what a measuring child sends (`ChildResult`, record/child.py) and what the
store keeps (`RunRecord`, record/run.py), with the migration of older stored shapes
(record/migrate.py). Pure data: pydantic models, no I/O, importable on both sides of the
parent/child boundary."""

from gpuscout.record.child import ChildResult, ChildWindow, FrameworkInfo
from gpuscout.record.run import SCHEMA_VERSION, Flag, GpuInfo, RunRecord, Telemetry, TelemetrySample, Window

__all__ = ["SCHEMA_VERSION", "ChildResult", "ChildWindow", "Flag", "FrameworkInfo", "GpuInfo", "RunRecord",
           "Telemetry", "TelemetrySample", "Window"]
