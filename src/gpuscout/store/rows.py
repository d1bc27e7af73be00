"""A record as the runs table keeps it and back: its row (the indexed columns and the JSON), the
record parsed from its JSON, and the first thing wrong in one that does not validate."""

from __future__ import annotations

import reprlib

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from gpuscout.core.text import storable
from gpuscout.record import STORED, StoredRecord

COLUMNS = (
    "id",
    "kind",
    "created_utc",
    "group_id",
    "workload",
    "backend",
    "precision",
    "xla",
    "batch_size",
    "data",
    "device",
    "gpu_name",
    "status",
    "throughput_median",
    "methodology_version",
)


def problem(exc: ValidationError) -> str:
    """The first thing wrong in a record, as `field.path: what`."""
    first = exc.errors()[0]
    loc = list(first["loc"])
    if loc and loc[0] in ("benchmark", "watch"):  # the record's kind, which the union put first
        loc = loc[1:]
    where = ".".join(str(p) for p in loc) or "record"
    got = "" if first["type"] == "missing" else f" (got {shown(first.get('input'))!r})"
    return f"{where}: {first['msg']}{got}"


# A value as an error line quotes it: its first characters, a long list or mapping cut before it is
# written out whole (str() of an imported record's 25 million values took seconds and gigabytes)
_SHOWN = reprlib.Repr()  # keywords from Python 3.12 on
_SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlevel = 16, 8, 60, 60, 3


def shown(value: object) -> str:
    return (value if isinstance(value, str) else _SHOWN.repr(value))[:60]


def parse_record(text: str) -> StoredRecord:
    """A stored record's JSON as its model (RunRecord or WatchRecord, by `kind`); ValidationError
    when it does not validate."""
    return STORED.validate_json(text)


def row_of(record: StoredRecord) -> tuple:
    try:
        text = record.model_dump_json()
    except PydanticSerializationError:  # text JSON cannot carry (lone surrogates): replaced, never lost
        record = type(record).model_validate(storable(record.model_dump()))
        text = record.model_dump_json()
    benchmark = record.kind == "benchmark"
    return (
        record.id,
        record.kind,
        record.created_utc,
        record.group_id,
        record.workload,
        record.backend.value if benchmark else None,
        record.precision.value if benchmark else None,
        int(record.xla) if benchmark else None,
        record.batch_size,
        record.data.value if benchmark else None,
        record.device,
        record.gpu.name if record.gpu else None,
        record.status,
        record.throughput.median if record.throughput else None,
        record.methodology_version,
        text,
    )
