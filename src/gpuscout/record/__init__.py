"""The typed record: what a measuring child sends (`ChildResult`, record/child.py) and what the
store keeps (`RunRecord`, record/run.py; `WatchRecord`, record/watch.py, for watched scripts),
with the migration of older stored shapes (record/migrate.py). Pure data: pydantic models, no
I/O, importable on both sides of the parent/child boundary."""

from typing import Annotated

from pydantic import Field, TypeAdapter

from gpuscout.record.child import ChildResult, ChildWindow, FrameworkInfo
from gpuscout.record.run import SCHEMA_VERSION, Flag, GpuInfo, RunRecord, Telemetry, TelemetrySample, Window
from gpuscout.record.watch import WatchRecord

# What the store holds: a benchmark run, or a watched script, told apart by `kind`.
StoredRecord = Annotated[RunRecord | WatchRecord, Field(discriminator="kind")]
STORED = TypeAdapter(StoredRecord)

__all__ = [
    "SCHEMA_VERSION",
    "STORED",
    "ChildResult",
    "ChildWindow",
    "Flag",
    "FrameworkInfo",
    "GpuInfo",
    "RunRecord",
    "StoredRecord",
    "Telemetry",
    "TelemetrySample",
    "WatchRecord",
    "Window",
]
